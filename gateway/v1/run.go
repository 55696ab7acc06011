package v1

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/execution"
)

// sessionMeta is what the v1 routes remember of a session beyond the registry:
// the kernel name the caller used and a Node.js session's max_idle_time.
// It is keyed by *stream.Session, so an entry whose session was deleted or
// reclaimed (by any route, or the reaper) no longer matches the registry
// and is pruned.
type sessionMeta struct {
	lang, id   string
	kernelName string        // jupyter sessions: the name the caller asked for
	maxIdle    time.Duration // reported idle limit; 0 is the backend's
}

// execReq is a validated v1 execute request.
type execReq struct {
	call.Call
	KernelName string // jupyter: recorded for listings
}

// run executes c on the one run path, recording what v1 knows of a
// session it creates.
func (v *Surface) run(ctx context.Context, c execReq) (*execution.Result, *call.Error) {
	return v.core.Execute(ctx, v.withMeta(c))
}

// runOr runs c; when it cannot run, it has answered why. The result is
// REST's: stream text without ANSI codes (Result.Plain).
func (v *Surface) runOr(ctx *fasthttp.RequestCtx, c execReq) (*execution.Result, bool) {
	c.Owner, c.Tenant = call.Owner(ctx), call.Tenant(ctx)
	res, ce := v.run(v.core.Ctx(), c)
	if ce != nil {
		ce.Write(ctx)
		return nil, false
	}
	return res.Plain(), true
}

// open returns the session of c, creating it, and records what v1 knows of
// it.
func (v *Surface) open(c execReq) (*stream.Session, bool, *call.Error) {
	return v.core.OpenSession(v.withMeta(c))
}

// withMeta is c's call, recording the v1 meta of a session it creates.
func (v *Surface) withMeta(c execReq) call.Call {
	ec := c.Call
	ec.OnCreate = func(sess *stream.Session) {
		v.setMeta(sess, func(m *sessionMeta) {
			m.kernelName = c.KernelName
			if c.Idle > 0 {
				m.maxIdle = c.Idle
			}
		})
	}
	return ec
}

// setMeta creates or updates the record of sess.
func (v *Surface) setMeta(sess *stream.Session, f func(*sessionMeta)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.meta[sess]
	if m == nil {
		m = &sessionMeta{lang: sess.Language, id: sess.ID}
		v.meta[sess] = m
	}
	f(m)
}

// metaOf returns a copy of what v1 knows of sess (zero when nothing), and
// drops the records of sessions that are gone.
func (v *Surface) metaOf(sess *stream.Session) sessionMeta {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, m := range v.meta {
		if v.core.Reg.Get(k.Tenant, m.lang, m.id) != k {
			delete(v.meta, k)
		}
	}
	if m := v.meta[sess]; m != nil {
		return *m
	}
	return sessionMeta{lang: sess.Language, id: sess.ID}
}

// deleteSession ends tenant's one session (lang, id) and returns how many
// runtimes ended (0 or 1). Unlike DELETE /v2/code/sessions/{id}, a v1
// route names one language, so same-id sessions of the other stay.
func (v *Surface) deleteSession(ctx context.Context, tenant, lang, id string) int {
	if v.core.Reg.DeleteOne(ctx, tenant, lang, id) {
		return 1
	}
	return 0
}

// sessionsOf lists tenant's live sessions of lang whose backend is
// accepted.
func (v *Surface) sessionsOf(tenant, lang string, accept func(stream.Backend) bool) []*stream.Session {
	var out []*stream.Session
	for _, s := range v.core.Reg.List(tenant) {
		if s.Language == lang && accept(s.Backend) {
			out = append(out, s)
		}
	}
	return out
}

func isKernel(b stream.Backend) bool { return b.Name != "native" }
func anyBackend(stream.Backend) bool { return true }
