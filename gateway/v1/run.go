package gateway

import (
	"context"
	"github.com/aiod/aiod/stream/execution"
	"time"

	"github.com/aiod/aiod/stream"
	"github.com/valyala/fasthttp"
)

// v1Meta is what the v1 routes remember of a session beyond the registry:
// the kernel name the caller used and a Node.js session's max_idle_time.
// It is keyed by *stream.Session, so an entry whose session was deleted or
// reclaimed (by any route, or the reaper) no longer matches the registry
// and is pruned.
type v1Meta struct {
	lang, id   string
	kernelName string        // jupyter sessions: the name the caller asked for
	maxIdle    time.Duration // reported idle limit; 0 is the backend's
}

// v1Call is a validated v1 execute request.
type v1Call struct {
	execCall
	KernelName string // jupyter: recorded for listings
}

// run executes c on the one run path, recording what v1 knows of a
// session it creates.
func (v *v1) run(ctx context.Context, c v1Call) (*execution.Result, *callError) {
	return v.s.execute(ctx, v.withMeta(c))
}

// runOr runs c; when it cannot run, it has answered why. The result is
// REST's: stream text without ANSI codes (Result.Plain).
func (v *v1) runOr(ctx *fasthttp.RequestCtx, c v1Call) (*execution.Result, bool) {
	c.Owner, c.Tenant = ownerOf(ctx), tenantOf(ctx)
	res, ce := v.run(v.s.reqCtx(), c)
	if ce != nil {
		ce.write(ctx)
		return nil, false
	}
	return res.Plain(), true
}

// open returns the session of c, creating it, and records what v1 knows of
// it.
func (v *v1) open(c v1Call) (*stream.Session, bool, *callError) {
	return v.s.openSession(v.withMeta(c))
}

// withMeta is c's call, recording the v1 meta of a session it creates.
func (v *v1) withMeta(c v1Call) execCall {
	ec := c.execCall
	ec.OnCreate = func(sess *stream.Session) {
		v.setMeta(sess, func(m *v1Meta) {
			m.kernelName = c.KernelName
			if c.Idle > 0 {
				m.maxIdle = c.Idle
			}
		})
	}
	return ec
}

// setMeta creates or updates the record of sess.
func (v *v1) setMeta(sess *stream.Session, f func(*v1Meta)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.meta[sess]
	if m == nil {
		m = &v1Meta{lang: sess.Language, id: sess.ID}
		v.meta[sess] = m
	}
	f(m)
}

// metaOf returns a copy of what v1 knows of sess (zero when nothing), and
// drops the records of sessions that are gone.
func (v *v1) metaOf(sess *stream.Session) v1Meta {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, m := range v.meta {
		if v.s.reg.Get(k.Tenant, m.lang, m.id) != k {
			delete(v.meta, k)
		}
	}
	if m := v.meta[sess]; m != nil {
		return *m
	}
	return v1Meta{lang: sess.Language, id: sess.ID}
}

// deleteSession ends tenant's one session (lang, id) and returns how many
// runtimes ended (0 or 1). Unlike DELETE /v2/code/sessions/{id}, a v1
// route names one language, so same-id sessions of the other stay.
func (v *v1) deleteSession(ctx context.Context, tenant, lang, id string) int {
	if v.s.reg.DeleteOne(ctx, tenant, lang, id) {
		return 1
	}
	return 0
}

// sessionsOf lists tenant's live sessions of lang whose backend is
// accepted.
func (v *v1) sessionsOf(tenant, lang string, accept func(stream.Backend) bool) []*stream.Session {
	var out []*stream.Session
	for _, s := range v.s.reg.List(tenant) {
		if s.Language == lang && accept(s.Backend) {
			out = append(out, s)
		}
	}
	return out
}

func v1IsKernel(b stream.Backend) bool { return b.Name != "native" }
func v1AnyBackend(stream.Backend) bool { return true }
