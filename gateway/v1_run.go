package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
)

// v1Meta is what the v1 routes remember of a session beyond the registry:
// the folder it was last told to work in, the kernel name the caller used,
// and a Node.js session's max_idle_time. It is keyed by *stream.Session, so
// an entry whose session was deleted or reclaimed (by any route, or the
// reaper) no longer matches the registry and is pruned.
type v1Meta struct {
	lang, id   string
	cwd        string        // "" is the runtimes' default folder
	kernelName string        // jupyter sessions: the name the caller asked for
	maxIdle    time.Duration // reported idle limit; 0 is the backend's
}

// v1Call is a validated v1 execute request.
type v1Call struct {
	execCall
	Cwd        string        // "" runs where the runtime already is
	KernelSpec string        // jupyter: the kernelspec; "" is the default one
	KernelName string        // jupyter: recorded for listings
	Idle       time.Duration // idle limit of a session this call creates; 0 is the backend's
}

// backend is how c's code runs: the route's usual backend, started in c.Cwd.
func (v *v1) backend(c v1Call) (stream.Backend, error) {
	return v.s.rt.For(backend.Want{Language: c.Language, Kernel: c.Kernel, KernelSpec: c.KernelSpec, Cwd: c.Cwd, Idle: c.Idle})
}

// run executes c: one-shot in a temporary runtime, or in the session
// c.SessionID, created on first use. A call without cwd or kernel choice
// takes the v2 path unchanged.
func (v *v1) run(ctx context.Context, c v1Call) (*stream.Result, *callError) {
	if c.SessionID == "" && c.Cwd == "" && c.KernelSpec == "" {
		return v.s.run(ctx, c.execCall)
	}
	b, err := v.backend(c)
	if err != nil {
		return nil, &callError{fasthttp.StatusServiceUnavailable, err.Error()}
	}
	req := stream.ExecRequest{Code: c.Code, Timeout: c.Timeout, Ref: c.Ref, Subs: c.Subs}
	if c.SessionID == "" {
		sess := v.s.reg.Temp(b)
		defer v.s.reg.Release(sess)
		res, err := sess.Execute(ctx, req)
		return res, v1RunError(err, "")
	}
	sess, _, ce := v.open(c, b)
	if ce != nil {
		return nil, ce
	}
	if c.Cwd != "" && v.cwdOf(sess) != c.Cwd {
		// The session's runtime already runs elsewhere: change folder in
		// the session's own order (a visible execution of its own).
		pre, err := sess.Execute(ctx, stream.ExecRequest{Code: backend.ChdirCode(c.Language, c.Cwd), Timeout: c.Timeout})
		if err != nil {
			return nil, v1RunError(err, c.SessionID)
		}
		if pre.Status != stream.StatusOK {
			pre.Code = c.Code
			pre.Notes = append([]string{fmt.Sprintf("cannot change the working directory to %q; the code did not run", c.Cwd)}, pre.Notes...)
			return pre, nil
		}
		v.setMeta(sess, func(m *v1Meta) { m.cwd = c.Cwd })
	}
	res, err := sess.Execute(ctx, req)
	return res, v1RunError(err, c.SessionID)
}

// open returns the session of c, creating it with b, and records what v1
// knows of it. A jupyter call on a native Python session is a conflict.
func (v *v1) open(c v1Call, b stream.Backend) (*stream.Session, bool, *callError) {
	sess, created, err := v.s.reg.Open(c.Language, c.SessionID, b)
	if err != nil {
		return nil, false, &callError{fasthttp.StatusServiceUnavailable, err.Error()}
	}
	if !created && c.Kernel && sess.Backend.Name == "native" {
		return nil, false, &callError{fasthttp.StatusConflict, fmt.Sprintf(
			"session %q is a native Python REPL session (AIO_CODE_BACKEND=native), and /v1/jupyter needs a kernel: use another session_id, or delete this one first", c.SessionID)}
	}
	if created {
		v.setMeta(sess, func(m *v1Meta) {
			m.cwd, m.kernelName = c.Cwd, c.KernelName
			if c.Idle > 0 {
				m.maxIdle = c.Idle
			}
		})
	}
	return sess, created, nil
}

// runError maps Execute's error the way the v2 route does.
func v1RunError(err error, id string) *callError {
	var se *stream.StartError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return &callError{fasthttp.StatusServiceUnavailable, se.Error()}
	case errors.Is(err, stream.ErrSessionClosed):
		return &callError{fasthttp.StatusConflict, fmt.Sprintf("session %q was deleted before this call ran", id)}
	default:
		return &callError{fasthttp.StatusServiceUnavailable, err.Error()}
	}
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
		if v.s.reg.Get(m.lang, m.id) != k {
			delete(v.meta, k)
		}
	}
	if m := v.meta[sess]; m != nil {
		return *m
	}
	return v1Meta{lang: sess.Language, id: sess.ID}
}

func (v *v1) cwdOf(sess *stream.Session) string { return v.metaOf(sess).cwd }

// deleteSession ends the one session (lang, id) and returns how many
// runtimes ended (0 or 1). Unlike DELETE /v2/code/sessions/{id}, a v1
// route names one language, so same-id sessions of the other stay.
func (v *v1) deleteSession(ctx context.Context, lang, id string) int {
	if v.s.reg.DeleteOne(ctx, lang, id) {
		return 1
	}
	return 0
}

// sessionsOf lists the live sessions of lang whose backend is accepted.
func (v *v1) sessionsOf(lang string, accept func(stream.Backend) bool) []*stream.Session {
	var out []*stream.Session
	for _, s := range v.s.reg.List() {
		if s.Language == lang && accept(s.Backend) {
			out = append(out, s)
		}
	}
	return out
}

func v1IsKernel(b stream.Backend) bool { return b.Name != "native" }
func v1AnyBackend(stream.Backend) bool { return true }
