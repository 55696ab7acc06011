package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Finished executions in a JetStream object store, aiod_executions, each
// kept for the execution retention (the bucket's TTL): a tenant's next
// home answers GET /v2/code/executions/{id} for what its last home ran.
// Objects are named "e/<tenant hash>/<id>"; a record names its tenant
// too, and the store that reads it checks both.

// ExecutionsBucket is the object store of finished executions.
const ExecutionsBucket = "aiod_executions"

// Executions counts the records this replica wrote (labels: outcome:
// written, failed, dropped: its queue was full).
const Executions = "cluster_executions"

// executionQueue bounds the records waiting for their write: past it a
// record is dropped (and counted), never waited for.
const executionQueue = 512

// maxExecutionRecord bounds a record read back.
const maxExecutionRecord = 64 << 20

type executionPut struct {
	name string
	rec  func() ([]byte, error) // encodes the record, in the writer
}

// SharedExecutions is the cluster's store of finished executions
// (execution.Shared): Put queues a record for one writer goroutine, which
// ends at Close after what is queued (within 2 s).
type SharedExecutions struct {
	c     *Cluster
	ttl   time.Duration
	queue chan executionPut
	ready chan struct{} // closed once obj is set (or the bucket failed)
	obj   jetstream.ObjectStore
}

// ShareExecutions opens (or makes) the executions' object store, whose
// records live for ttl, and starts its writer.
func (c *Cluster) ShareExecutions(ttl time.Duration) *SharedExecutions {
	s := &SharedExecutions{c: c, ttl: ttl, queue: make(chan executionPut, executionQueue), ready: make(chan struct{})}
	c.done.Add(1)
	go s.write()
	return s
}

func (s *SharedExecutions) open() {
	defer close(s.ready)
	js, err := jetstream.New(s.c.nc)
	if err == nil {
		s.obj, err = openOrMake(s.c.ctx, s.c.nc, "the executions' object store",
			func(ctx context.Context) (jetstream.ObjectStore, error) { return js.ObjectStore(ctx, ExecutionsBucket) },
			func(ctx context.Context, replicas int) (jetstream.ObjectStore, error) {
				return js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: ExecutionsBucket, Replicas: replicas, TTL: s.ttl,
					Description: "aiod: finished executions, for any replica to answer"})
			})
	}
	if err != nil {
		s.c.log.Warn("cluster: finished executions are not shared", "err", err)
	}
}

func (s *SharedExecutions) write() {
	defer s.c.done.Done()
	s.open()
	put := func(ctx context.Context, p executionPut) {
		if s.obj == nil {
			s.c.count(Executions, "failed")
			return
		}
		rec, err := p.rec()
		if err == nil {
			err = attempts(ctx, func(ctx context.Context) error {
				_, err := s.obj.Put(ctx, jetstream.ObjectMeta{Name: p.name}, bytes.NewReader(rec))
				return err
			})
		}
		if err != nil {
			s.c.count(Executions, "failed")
			return
		}
		s.c.count(Executions, "written")
	}
	for {
		select {
		case p := <-s.queue:
			ctx, cancel := context.WithTimeout(s.c.ctx, 10*time.Second)
			put(ctx, p)
			cancel()
		case <-s.c.ctx.Done():
			// What finished as the replica stopped, within 2 s.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for {
				select {
				case p := <-s.queue:
					put(ctx, p)
				default:
					return
				}
			}
		}
	}
}

func executionName(tenant, id string) string {
	return "e/" + tenantHash(tenant) + "/" + id
}

// Put queues tenant's finished execution id for the store; the writer
// encodes its record (rec).
func (s *SharedExecutions) Put(tenant, id string, rec func() ([]byte, error)) {
	select {
	case s.queue <- executionPut{name: executionName(tenant, id), rec: rec}:
	default:
		s.c.count(Executions, "dropped")
	}
}

// Get reads tenant's execution id from the store, within 5 s.
func (s *SharedExecutions) Get(tenant, id string) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(s.c.ctx, 5*time.Second)
	defer cancel()
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, false
	}
	if s.obj == nil {
		return nil, false
	}
	var out []byte
	err := attempts(ctx, func(ctx context.Context) error {
		r, err := s.obj.Get(ctx, executionName(tenant, id))
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil // not there: no attempt finds it
		}
		if err != nil {
			return err
		}
		defer r.Close()
		out, err = io.ReadAll(io.LimitReader(r, maxExecutionRecord))
		return err
	})
	return out, err == nil && out != nil
}
