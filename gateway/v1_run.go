package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aiod/aiod/kernel"
	"github.com/aiod/aiod/stream"
	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
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
	Spec       *kernel.Spec  // jupyter: the kernelspec; nil is the default one
	KernelName string        // jupyter: recorded for listings
	Idle       time.Duration // idle limit of a session this call creates; 0 is the backend's
}

// chdirCode is code that makes a runtime of lang work in dir.
func v1ChdirCode(lang, dir string) string {
	q, _ := json.Marshal(dir) // a JSON string is a valid Python and JavaScript literal
	if lang == "javascript" {
		// The driver's require resolves from the folder the REPL started
		// in; point it at the new one.
		return "process.chdir(" + string(q) + "); globalThis.require = require('module').createRequire(require('path').join(" + string(q) + ", '<repl>'))"
	}
	return "__import__('os').chdir(" + string(q) + ")"
}

// inDir makes every runtime b starts work in dir: right after the start,
// before the runtime is handed to its session, a silent execute (no
// execution count, no history, no output) changes its working directory.
// It wraps Start, so it composes with prewarm pools and restarts.
func v1InDir(b stream.Backend, dir string) stream.Backend {
	start := b.Start
	lang := b.Language
	b.Start = func(ctx context.Context, h kernel.Handler) (stream.Runtime, error) {
		id := stream.NewID()
		var once sync.Once
		reply := make(chan string, 1)
		wrapped := func(m *kernel.Message) {
			if m.Parent.MsgID != id {
				h(m)
				return
			}
			if m.Header.MsgType == "execute_reply" {
				var c struct {
					Status string `json:"status"`
					Ename  string `json:"ename"`
					Evalue string `json:"evalue"`
				}
				_ = json.Unmarshal(m.Content, &c)
				st := c.Status
				if st != "ok" {
					st = fmt.Sprintf("%s %s: %s", c.Status, c.Ename, c.Evalue)
				}
				once.Do(func() { reply <- st })
			}
		}
		rt, err := start(ctx, wrapped)
		if err != nil {
			return nil, err
		}
		fail := func(why string) (stream.Runtime, error) {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = rt.Close(cctx)
			return nil, fmt.Errorf("change the working directory to %q: %s", dir, why)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := rt.Execute(wctx, kernel.ExecuteRequest{MsgID: id, Code: v1ChdirCode(lang, dir), Silent: true, NoHistory: true}); err != nil {
			return fail(err.Error())
		}
		select {
		case st := <-reply:
			if st != "ok" {
				return fail(st)
			}
			return rt, nil
		case <-rt.Done():
			return fail(fmt.Sprintf("the runtime died (%v)", rt.Err()))
		case <-wctx.Done():
			return fail("no answer within 30 s")
		}
	}
	return b
}

// backend is how c's code runs: the route's usual backend, started in c.Cwd.
func (v *v1) backend(c v1Call) (stream.Backend, error) {
	var b stream.Backend
	if c.Spec != nil {
		b = v.s.kernelBackend(c.Spec)
	} else {
		var err error
		if b, err = v.s.backendFor(c.Language, c.Kernel); err != nil {
			return b, err
		}
	}
	if c.Cwd != "" {
		b = v1InDir(b, c.Cwd)
	}
	if c.Idle > 0 {
		b.Idle = c.Idle
	}
	return b, nil
}

// run executes c: one-shot in a temporary runtime, or in the session
// c.SessionID, created on first use. A call without cwd or kernel choice
// takes the v2 path unchanged.
func (v *v1) run(ctx context.Context, c v1Call) (*stream.Result, *callError) {
	if c.SessionID == "" && c.Cwd == "" && c.Spec == nil {
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
		pre, err := sess.Execute(ctx, stream.ExecRequest{Code: v1ChdirCode(c.Language, c.Cwd), Timeout: c.Timeout})
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
