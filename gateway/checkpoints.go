package gateway

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/gateway/cluster"
	"github.com/aiod/aiod/gateway/guard"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/snapshot"
	"github.com/valyala/fasthttp"
)

// checkpoints writes the named sessions of the tenants this replica is
// home to into the cluster's object store a short time after they ran code
// (--cluster-checkpoint): a tenant whose home dies without a stop (kill -9,
// a lost machine) finds them at its next home, as it was at the last
// checkpoint. One goroutine writes them, one at a time, as they fall
// due; a session that runs code again before its write is written once,
// and one that is busy then is tried again `after` later. A tenant's files
// are written after its sessions of the same moment, and `after` a write
// through the file plane.
type checkpoints struct {
	s      *Server
	after  time.Duration
	ctx    context.Context // ends at close: a write in progress stops
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{}

	mu    sync.Mutex
	due   map[*stream.Session]time.Time
	files map[string]time.Time // tenants whose files changed through the file plane
}

func newCheckpoints(s *Server, after time.Duration) *checkpoints {
	c := &checkpoints{s: s, after: after, wake: make(chan struct{}, 1), done: make(chan struct{}), due: map[*stream.Session]time.Time{},
		files: map[string]time.Time{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.run()
	return c
}

// mark notes that sess ran code: it is written `after` from now, unless a
// write of it is due already.
func (c *checkpoints) mark(sess *stream.Session) {
	c.mu.Lock()
	if _, ok := c.due[sess]; !ok {
		c.due[sess] = time.Now().Add(c.after)
	}
	c.mu.Unlock()
	c.poke()
}

// markFiles notes that tenant's files changed through the file plane.
func (c *checkpoints) markFiles(tenant string) {
	c.mu.Lock()
	if _, ok := c.files[tenant]; !ok {
		c.files[tenant] = time.Now().Add(c.after)
	}
	c.mu.Unlock()
	c.poke()
}

func (c *checkpoints) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// close stops the writer and waits for it; what was due is not written
// (a stop hands over what the registry saved as it closed).
func (c *checkpoints) close() {
	c.cancel()
	<-c.done
}

func (c *checkpoints) run() {
	defer close(c.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		ready, tenants, next := c.take(time.Now())
		for _, sess := range ready {
			if c.ctx.Err() != nil {
				return
			}
			if c.write(sess) {
				tenants[sess.Tenant] = true
			}
		}
		// The files of the tenants written, once for all their sessions.
		for tenant := range tenants {
			if c.ctx.Err() != nil {
				return
			}
			c.writeFiles(tenant)
		}
		if len(ready) > 0 || len(tenants) > 0 {
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), time.Millisecond)
		}
		t.Reset(wait)
		select {
		case <-c.ctx.Done():
			return
		case <-c.wake:
		case <-t.C:
		}
	}
}

// take removes and returns the sessions, and the tenants whose files,
// are due at now, and says when the next one falls due (zero: none waits).
func (c *checkpoints) take(now time.Time) (ready []*stream.Session, tenants map[string]bool, next time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tenants = map[string]bool{}
	soonest := func(at time.Time) {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	for sess, at := range c.due {
		if at.After(now) {
			soonest(at)
			continue
		}
		ready = append(ready, sess)
		delete(c.due, sess)
	}
	for tenant, at := range c.files {
		if at.After(now) {
			soonest(at)
			continue
		}
		tenants[tenant] = true
		delete(c.files, tenant)
	}
	return ready, tenants, next
}

// writeFiles writes tenant's files to its checkpoint (when files move).
func (c *checkpoints) writeFiles(tenant string) {
	if !c.s.movesFiles() {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, 2*time.Minute)
	defer cancel()
	if err := c.s.writeFiles(ctx, tenant); err != nil {
		c.s.log.Warn("cluster: checkpoint a tenant's files", "tenant", tenant, "err", err)
	}
}

// write checkpoints one session, if it is still open and its tenant still
// homed here, and says whether its tenant's files are to be written now
// (it was written, or its language keeps no state but files).
func (c *checkpoints) write(sess *stream.Session) bool {
	select {
	case <-sess.Closed():
		return false
	default:
	}
	cl := c.s.cluster
	if cl.HomeOf(sess.Tenant) != cl.ID() {
		return false // moved: its new home checkpoints it from now on
	}
	if sess.Busy() {
		// A save waits for the session's turn: a long call would hold up
		// every other session's checkpoint. It is tried again later.
		c.mark(sess)
		return false
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.s.snaps.Config().SaveTimeout+30*time.Second)
	defer cancel()
	began := time.Now()
	info, err := c.s.snaps.Save(ctx, sess, snapshot.WhyCheckpoint)
	var unsupported *snapshot.UnsupportedError
	if errors.As(err, &unsupported) {
		return true // bash: no state of its own to save, but its commands change files
	}
	if errors.Is(err, stream.ErrNoRuntime) || errors.Is(err, stream.ErrSessionClosed) {
		return false // nothing live to write: the last checkpoint stands
	}
	name := checkpointName(sess.Language, sess.ID)
	if err == nil {
		err = putFile(ctx, cl, sess.Tenant, name, info.Path())
	}
	if latest, _ := c.s.snaps.Latest(snapshot.Key{Tenant: sess.Tenant, Language: sess.Language, ID: sess.ID}); latest == nil {
		// Deleted while it was written (its snapshots are forgotten): its
		// checkpoint goes too. A session reclaimed for idleness keeps
		// its snapshots, and its checkpoint.
		c.s.dropCheckpoints(sess.Tenant, sess.Language, sess.ID)
	}
	if err != nil {
		cl.Count(cluster.Checkpoints, "failed", 1)
		c.s.log.Warn("cluster: checkpoint a session", "tenant", sess.Tenant, "session", sess.ID, "language", sess.Language, "err", err)
		return false
	}
	cl.Count(cluster.Checkpoints, "written", 1)
	cl.Observe(cluster.CheckpointSecs, "", time.Since(began).Seconds())
	return true
}

// putFile writes the file at path as object name of tenant's checkpoint.
func putFile(ctx context.Context, cl *cluster.Cluster, tenant, name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return cl.PutCheckpoint(ctx, tenant, name, nil, f)
}

// checkpointName names a session's object in its tenant's checkpoint.
func checkpointName(lang, id string) string {
	return lang + "/" + hex.EncodeToString([]byte(id))
}

// dropCheckpoints deletes the checkpoint of tenant's session id in lang
// ("": every language), so that a deleted session does not come back at
// the tenant's next home.
func (s *Server) dropCheckpoints(tenant, lang, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	langs := []string{lang}
	if lang == "" {
		langs = call.Languages
	}
	var names []string
	for _, l := range langs {
		names = append(names, checkpointName(l, id))
	}
	err := s.cluster.DropCheckpoints(ctx, tenant, names...)
	if err != nil {
		s.log.Warn("cluster: delete a deleted session's checkpoint", "tenant", tenant, "session", id, "err", err)
	}
}

// clusterSnapshots are the snapshots as a replica's registry sees them: a
// deleted session's checkpoint is deleted with its snapshots.
type clusterSnapshots struct {
	*snapshot.Manager
	s *Server
}

func (cs clusterSnapshots) Forget(tenant, lang, id string) int {
	n := cs.Manager.Forget(tenant, lang, id)
	if cs.s.cluster != nil {
		cs.s.dropCheckpoints(tenant, lang, id)
	}
	return n
}

// sessionRan is the registry's Ran: a named session ran code.
func (s *Server) sessionRan(sess *stream.Session) {
	if s.checkpoints != nil {
		s.checkpoints.mark(sess)
	}
}

// sharedExecutions hands the execution store's finished executions to the
// cluster's store, once the replica has joined (cluster.SharedExecutions).
type sharedExecutions struct{ s *Server }

func (x sharedExecutions) Put(tenant, id string, rec func() ([]byte, error)) {
	if sh := x.s.sharedExecs; sh != nil {
		sh.Put(tenant, id, rec)
	}
}

func (x sharedExecutions) Get(tenant, id string) ([]byte, bool) {
	if sh := x.s.sharedExecs; sh != nil {
		return sh.Get(tenant, id)
	}
	return nil, false
}

// noteFileWrites marks a tenant's files for its next checkpoint when a
// request changed them through the file plane or the Jupyter contents API
// (code that writes files marks them through its session).
func (s *Server) noteFileWrites(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		next(ctx)
		if s.checkpoints == nil || ctx.IsGet() || ctx.IsHead() || ctx.IsOptions() || ctx.Response.StatusCode()/100 != 2 {
			return
		}
		p := string(ctx.Path())
		switch {
		case p == "/v2/fs/write", p == "/v2/fs/upload", p == "/v2/fs/delete", p == "/v1/file/write", p == "/v1/file/upload",
			p == "/v1/file/replace", p == "/v1/file/str_replace_editor", strings.HasPrefix(p, "/api/contents"):
			s.checkpoints.markFiles(guard.CallerOf(ctx).Tenant())
		}
	}
}
