package cluster

import (
	"context"
	"errors"
	"io"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Checkpoints: what a tenant's home hands over when it stops, kept in a
// JetStream object store (three copies on a system of three servers or
// more), and taken in by the tenant's next home before it serves the
// tenant. Objects are named by the tenant (hashed) and a name the caller
// gives: "c/<tenant hash>/<name>".

// CheckpointBucket is the object store of checkpoints.
const CheckpointBucket = "aiod_checkpoints"

// objects opens (or makes) the checkpoints' object store, once.
func (c *Cluster) objects(ctx context.Context) (jetstream.ObjectStore, error) {
	c.objMu.Lock()
	defer c.objMu.Unlock()
	if c.obj != nil {
		return c.obj, nil
	}
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, err
	}
	obj, err := openOrMake(ctx, c.nc, "the checkpoints' object store",
		func(ctx context.Context) (jetstream.ObjectStore, error) { return js.ObjectStore(ctx, CheckpointBucket) },
		func(ctx context.Context, replicas int) (jetstream.ObjectStore, error) {
			return js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: CheckpointBucket, Replicas: replicas,
				Description: "aiod: what a tenant's home hands over when it stops"})
		})
	if err != nil {
		return nil, err
	}
	c.obj = obj
	return obj, nil
}

func checkpointPrefix(tenant string) string {
	return "c/" + tenantHash(tenant) + "/"
}

// Checkpoint replaces tenant's checkpoint with the objects put calls
// give (name, metadata, the bytes of r); objects of an earlier checkpoint not given
// again are deleted.
func (c *Cluster) Checkpoint(ctx context.Context, tenant string, each func(put func(name string, meta map[string]string, r io.Reader) error) error) error {
	obj, err := c.objects(ctx)
	if err != nil {
		return err
	}
	prefix := checkpointPrefix(tenant)
	kept := map[string]bool{}
	err = each(func(name string, meta map[string]string, r io.Reader) error {
		full := prefix + name
		kept[full] = true
		_, err := obj.Put(ctx, jetstream.ObjectMeta{Name: full, Metadata: objectMeta(tenant, meta)}, r)
		return err
	})
	if err != nil {
		return err
	}
	old, err := list(ctx, obj)
	if err != nil {
		return err
	}
	for _, o := range old {
		if strings.HasPrefix(o.Name, prefix) && !kept[o.Name] && !o.Deleted {
			_ = obj.Delete(ctx, o.Name)
		}
	}
	return nil
}

// PutCheckpoint writes one object of tenant's checkpoint (name: as
// Checkpoint's put names them), replacing the one of that name and
// leaving the others; meta is kept with it (Restore hands it back).
func (c *Cluster) PutCheckpoint(ctx context.Context, tenant, name string, meta map[string]string, r io.Reader) error {
	obj, err := c.objects(ctx)
	if err != nil {
		return err
	}
	_, err = obj.Put(ctx, jetstream.ObjectMeta{Name: checkpointPrefix(tenant) + name, Metadata: objectMeta(tenant, meta)}, r)
	return err
}

// objectMeta is an object's metadata: meta and its tenant.
func objectMeta(tenant string, meta map[string]string) map[string]string {
	md := map[string]string{"tenant": tenant}
	maps.Copy(md, meta)
	return md
}

// DropCheckpoints deletes the objects of tenant's checkpoint of these
// names (as Checkpoint's put names them); a name it does not hold is no
// error.
func (c *Cluster) DropCheckpoints(ctx context.Context, tenant string, names ...string) error {
	obj, err := c.objects(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		err := attempts(ctx, func(ctx context.Context) error {
			err := obj.Delete(ctx, checkpointPrefix(tenant)+name)
			if errors.Is(err, jetstream.ErrObjectNotFound) {
				return nil
			}
			return err
		})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Restore hands each object of tenant's checkpoint to take (its name
// without the tenant's prefix, its bytes, its size, its metadata).
func (c *Cluster) Restore(ctx context.Context, tenant string, take func(name string, r io.Reader, n int64, meta map[string]string) error) error {
	obj, err := c.objects(ctx)
	if err != nil {
		return err
	}
	list, err := list(ctx, obj)
	if err != nil {
		return err
	}
	prefix := checkpointPrefix(tenant)
	var errs []error
	for _, o := range list {
		if o.Deleted || !strings.HasPrefix(o.Name, prefix) {
			continue
		}
		err := attempts(ctx, func(ctx context.Context) error {
			r, err := obj.Get(ctx, o.Name)
			if err != nil {
				return err
			}
			defer r.Close()
			return take(strings.TrimPrefix(o.Name, prefix), r, int64(o.Size), o.Metadata)
		})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// list is the object store's objects (none: an empty list).
func list(ctx context.Context, obj jetstream.ObjectStore) ([]*jetstream.ObjectInfo, error) {
	var out []*jetstream.ObjectInfo
	err := attempts(ctx, func(ctx context.Context) error {
		l, err := obj.List(ctx)
		if errors.Is(err, jetstream.ErrNoObjectsFound) {
			l, err = nil, nil
		}
		out = l
		return err
	})
	return out, err
}

// attempts runs op with 3 s for each attempt until it succeeds or ctx
// ends: a read of a JetStream stream whose leader was just lost (a server
// gone) can wait for ever on the old one, and the next attempt finds the
// new.
func attempts(ctx context.Context, op func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := op(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !pause(ctx, 100*time.Millisecond) {
			return err
		}
	}
}

// Homed is the tenants the directory homes on this replica that it has
// served (taken in, Adopt): only those have a state here to hand over; a
// checkpoint of one it never served would delete the one it never took in.
func (c *Cluster) Homed() []string {
	c.mu.Lock()
	var homed []string
	for _, h := range c.homes {
		if h.Home == c.id && h.Tenant != "" {
			homed = append(homed, h.Tenant)
		}
	}
	c.mu.Unlock()
	c.adopt.mu.Lock()
	defer c.adopt.mu.Unlock()
	var out []string
	for _, t := range homed {
		if _, ok := c.adopt.done[t]; ok {
			out = append(out, t)
		}
	}
	return out
}

// adoptions runs a replica's take-in of each tenant once per process: the
// first request of a tenant here waits for it, later ones do not.
type adoptions struct {
	mu   sync.Mutex
	done map[string]chan struct{}
}

// forget lets tenant be taken in again (it moved to another replica).
func (a *adoptions) forget(tenant string) {
	a.mu.Lock()
	delete(a.done, tenant)
	a.mu.Unlock()
}

// Adopt runs take for tenant the first time this replica serves it (its
// checkpoint taken in); a call while it runs waits for it, or for ctx.
func (c *Cluster) Adopt(ctx context.Context, tenant string, take func(context.Context) error) {
	c.adopt.mu.Lock()
	if c.adopt.done == nil {
		c.adopt.done = map[string]chan struct{}{}
	}
	ch, started := c.adopt.done[tenant]
	if !started {
		ch = make(chan struct{})
		c.adopt.done[tenant] = ch
	}
	c.adopt.mu.Unlock()
	if started {
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return
	}
	defer close(ch)
	if err := take(ctx); err != nil {
		c.log.Warn("cluster: take in a tenant's checkpoint", "tenant", tenant, "err", err)
	}
}
