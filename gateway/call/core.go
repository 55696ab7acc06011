package call

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/fsplane/fsview"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/execution"
)

// Config is what the core needs to know of the daemon's limits. Zero
// values are not defaulted here: the gateway's Config fills them in.
type Config struct {
	DefaultTimeout     time.Duration // a call without a timeout gets it
	MaxTimeout         time.Duration // the largest timeout a call may ask for
	KernelIdle         time.Duration // idle kernel sessions are reclaimed after it
	NativeIdle         time.Duration // idle native REPL sessions are reclaimed after it
	KernelStartTimeout time.Duration // bound on one runtime start
	OutputBudget       int           // bytes of output kept per execution
	StreamWrite        time.Duration // bound on writing one batch of a streamed answer (SSE, NDJSON); 10 s
	// HeldTenant and HeldTotal bound the code bytes that one tenant's calls,
	// and all calls, hold in memory while they wait in a session's queue
	// or run (HeldTenantFlag, HeldTotalFlag); 0 is no bound.
	HeldTenant, HeldTotal int64
	Logger                *slog.Logger
}

// Core runs calls for every surface: it holds the registry and the
// runtimes, the one root context of the daemon's work, and the goroutines
// surfaces start to run executions that outlive a request (a WebSocket's,
// a streamed POST's). Surfaces take a *Core; none holds the gateway's
// Server.
type Core struct {
	// Set once.
	Reg *stream.Registry
	RT  *backend.Runtimes
	Env *backend.Environment // RT.Env(): what discovery found
	Cfg Config
	Log *slog.Logger

	ctx       context.Context // ends at Close; parent of all background work
	cancel    context.CancelFunc
	workspace string         // Workspace
	hostFS    *fsview.HostFS // the file plane's view without tenants or a runtime user
	held      held           // code of admitted calls in memory (held.go)

	mu      sync.Mutex // guards closing, wg.Add and sends on idle
	closing bool
	wg      sync.WaitGroup // Go's workers
	idle    chan func()    // Go's workers that wait for work receive on it
}

// workerIdle is how long a worker of Go waits for more work before it ends.
const workerIdle = 10 * time.Second

// New makes a core over reg and rt.
func New(reg *stream.Registry, rt *backend.Runtimes, cfg Config) *Core {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Core{Reg: reg, RT: rt, Env: rt.Env(), Cfg: cfg, Log: cfg.Logger, idle: make(chan func())}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.workspace = "/"
	if w := rt.Workdir(); w != "" {
		c.workspace = w
		if abs, err := filepath.Abs(w); err == nil {
			c.workspace = abs
		}
	}
	c.hostFS = fsview.NewHostFS(c.workspace)
	c.held.perTenant, c.held.total = cfg.HeldTenant, cfg.HeldTotal
	return c
}

// Ctx is the context of work that is not a request's: it ends when Close
// begins. A *fasthttp.RequestCtx is reset and reused once its handler
// returns, and a context derived from it reads it from timer goroutines
// after that; so work never hangs off a request, always off Ctx.
func (c *Core) Ctx() context.Context { return c.ctx }

// Go runs f on a goroutine that Close waits for; false (and f not run)
// once Close has begun. The goroutine is a worker that, its work done,
// waits workerIdle for more before it ends: a new goroutine's stack starts
// small and is copied to a larger one whenever a call runs deep (the JSON
// encoder's type lookup does, in every execute request), which cost a
// WebSocket execution a twentieth of aiod's CPU; a worker's stack has
// grown already.
func (c *Core) Go(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	select {
	case c.idle <- f:
		return true
	default:
	}
	c.wg.Add(1)
	go c.worker(f)
	return true
}

// worker runs f, then what Go hands it, until it has waited workerIdle
// for work or Ctx ends. Go sends work only before Cancel, under mu, so no
// work reaches a worker after Close has begun.
func (c *Core) worker(f func()) {
	defer c.wg.Done()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		f = nil // let the finished work's closure go while waiting
		t.Reset(workerIdle)
		select {
		case f = <-c.idle:
		case <-t.C:
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// Cancel ends Ctx: background work is told to stop. Go refuses new work
// from then on.
func (c *Core) Cancel() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.cancel()
}

// Close cancels Ctx and waits, bounded by ctx, for every goroutine Go
// started.
func (c *Core) Close(ctx context.Context) error {
	c.Cancel()
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Execute runs call: in a temporary runtime, or in the named session
// created on first use. It is the one run path; every failure is mapped
// once (MapError). A call whose execution id names an execution already
// queued, running or done does not run the code again: it answers that
// execution's result (Replayed when it had finished before the call).
func (c *Core) Execute(ctx context.Context, call Call) (*execution.Result, *Error) {
	rec, created, e := c.Claim(call)
	if e != nil {
		return nil, e
	}
	if !created {
		return c.Attach(ctx, rec)
	}
	return c.RunClaimed(ctx, call, rec)
}

// Start runs call's claimed execution rec in the background (Go), for a
// surface that follows rec instead of waiting for it: a client that goes
// away stops only its own view of it. At shutdown rec fails at once.
// done, when not nil, is called once the run is over (or refused).
func (c *Core) Start(call Call, rec *execution.Record, done func()) {
	ok := c.Go(func() {
		if done != nil {
			defer done()
		}
		_, _ = c.RunClaimed(c.ctx, call, rec)
	})
	if !ok {
		if done != nil {
			done()
		}
		c.Unadmit(call)
		rec.Fail(MapError(stream.ErrShuttingDown, call))
	}
}

// admitted is the session Admit took for a call before it ran.
type admitted struct {
	sess    *stream.Session
	created bool
	temp    bool  // a one-shot call's temporary session: released after the run
	held    int64 // code bytes counted against the held bounds; given back once
}

// Admit takes call's session before the call runs (opens its named
// session, creating it, or takes a temporary one), so that a surface that
// streams can say a refusal by the session caps (429, Retry-After) before
// it answers anything else. Run or Start the call afterwards, or give an
// admitted call that will not run back with Unadmit.
func (c *Core) Admit(call *Call) *Error {
	if call.adm != nil {
		return nil
	}
	n := int64(len(call.Code))
	if e := c.held.take(call.Tenant, n); e != nil {
		return e
	}
	if e := c.admit(call); e != nil {
		c.held.give(call.Tenant, n)
		return e
	}
	call.adm.held = n
	return nil
}

// release gives back what Admit counted of call's code, once.
func (c *Core) release(call Call) {
	if call.adm != nil && call.adm.held > 0 {
		c.held.give(call.Tenant, call.adm.held)
		call.adm.held = 0
	}
}

func (c *Core) admit(call *Call) *Error {
	if call.SessionID != "" {
		open := *call
		if open.Language == backend.Bash {
			open.Env = nil // a bash session takes env per execution (run)
		}
		sess, created, e := c.OpenSession(open)
		if e != nil {
			return e
		}
		call.adm = &admitted{sess: sess, created: created}
		return nil
	}
	b, err := c.Backend(*call)
	if err != nil {
		return MapError(err, *call)
	}
	sess, err := c.Reg.TempFor(call.Owner, call.Tenant, b)
	if err != nil {
		return MapError(err, *call)
	}
	call.adm = &admitted{sess: sess, temp: true}
	return nil
}

// Unadmit gives back what Admit took for a call that will not run.
func (c *Core) Unadmit(call Call) {
	c.release(call)
	if call.adm != nil && call.adm.temp {
		c.Reg.Release(call.adm.sess)
	}
}

// Claim records call's execution in the store; created is false when its
// id names one that exists.
func (c *Core) Claim(call Call) (*execution.Record, bool, *Error) {
	if call.Cwd != "" {
		if e := c.CheckCwd(call.Tenant, call.Cwd); e != nil {
			return nil, false, e
		}
	}
	rec, created, err := c.Reg.Executions().Claim(call.Tenant, call.ExecutionID, execution.Key{Language: call.Language, SessionID: call.SessionID, Code: call.Code})
	var gone *execution.GoneError
	switch {
	case errors.Is(err, execution.ErrExecutionConflict):
		return nil, false, &Error{Status: fasthttp.StatusConflict, Msg: fmt.Sprintf("execution_id %q: %v; choose another id", call.ExecutionID, err)}
	case errors.As(err, &gone):
		return nil, false, &Error{Status: fasthttp.StatusGone, Msg: gone.Error()}
	case err != nil:
		return nil, false, &Error{Status: fasthttp.StatusServiceUnavailable, Msg: err.Error()}
	}
	return rec, created, nil
}

// Attach waits for an execution another call started and answers its
// result.
func (c *Core) Attach(ctx context.Context, rec *execution.Record) (*execution.Result, *Error) {
	finished := false
	select {
	case <-rec.Done():
		finished = true
	default:
	}
	res, failed, err := rec.Wait(ctx)
	switch {
	case err != nil:
		return nil, MapError(err, Call{})
	case failed != nil:
		return nil, ErrorOf(failed)
	}
	cp := *res
	cp.Replayed = finished
	return &cp, nil
}

// RunClaimed runs call, whose execution rec the caller claimed; when it
// cannot run, rec says why too.
func (c *Core) RunClaimed(ctx context.Context, call Call, rec *execution.Record) (*execution.Result, *Error) {
	res, e := c.run(ctx, call, rec)
	switch {
	case e != nil:
		rec.Fail(e)
	case res.ExecutionID != rec.ID:
		// Another execution answered for this one (a folder change that
		// failed before the code could run).
		res.ExecutionID = rec.ID
		rec.Deliver(execution.Event{ExecutionID: rec.ID, Result: res})
	}
	return res, e
}

func (c *Core) run(ctx context.Context, call Call, rec *execution.Record) (*execution.Result, *Error) {
	req := stream.ExecRequest{Code: call.Code, Timeout: call.Timeout, Origin: call.Origin, Subs: call.Subs, Record: rec, Warnings: call.Warnings}
	if call.SessionID != "" && call.Language == backend.Bash && len(call.Env) > 0 {
		// A bash session takes env for this execution only: exported
		// before the code, put back after it (Admit opens it without).
		req.Run = backend.WithEnvCode(call.Code, call.Env)
	}
	if e := c.Admit(&call); e != nil {
		return nil, e
	}
	defer c.release(call)
	sess, created := call.adm.sess, call.adm.created
	if call.adm.temp {
		defer c.Reg.Release(sess)
		res, err := sess.Execute(ctx, req)
		return res, MapError(err, call)
	}
	if !created && len(call.Env) > 0 && call.Language != backend.Bash {
		req.Warnings = append(req.Warnings, fmt.Sprintf("env applies when a session starts its runtime: session %q was running, so env was not applied", call.SessionID))
	}
	if call.Cwd != "" {
		release, err := sess.FolderTurn(ctx)
		if err != nil {
			return nil, MapError(err, call)
		}
		defer release()
	}
	if !created && call.Cwd != "" && sess.Cwd() != call.Cwd {
		// The session's runtime already runs elsewhere: change folder in
		// the session's own order (a visible execution of its own).
		pre, err := sess.Execute(ctx, stream.ExecRequest{Code: backend.ChdirCode(call.Language, call.Cwd), Timeout: call.Timeout})
		if err != nil {
			return nil, MapError(err, call)
		}
		if pre.Status != execution.StatusOK {
			pre.Code = call.Code
			pre.Notes = append([]string{fmt.Sprintf("cannot change the working directory to %q; the code did not run", call.Cwd)}, pre.Notes...)
			return pre, nil
		}
		sess.SetCwd(call.Cwd)
	}
	res, err := sess.Execute(ctx, req)
	return res, MapError(err, call)
}

// Backend is how call's code runs; its error is the interpreter that is
// missing (map it with MapError).
func (c *Core) Backend(call Call) (stream.Backend, error) {
	return c.RT.For(backend.Want{Language: call.Language, Kernel: call.Kernel, KernelSpec: call.KernelSpec, Cwd: call.Cwd, Env: call.Env, Idle: call.Idle, Tenant: call.Tenant})
}

// OpenSession returns the session of call, creating it (and calling
// call.OnCreate) when it does not exist. A call that needs a kernel on a
// session without one is a conflict.
func (c *Core) OpenSession(call Call) (*stream.Session, bool, *Error) {
	b, err := c.Backend(call)
	if err != nil {
		return nil, false, MapError(err, call)
	}
	sess, created, err := c.Reg.OpenFor(call.Owner, call.Tenant, call.Language, call.SessionID, b)
	if err != nil {
		return nil, false, MapError(err, call)
	}
	if !created && call.Kernel && sess.Backend.Name == backend.Native {
		return nil, false, &Error{Status: fasthttp.StatusConflict, Msg: fmt.Sprintf(
			"session %q is a native Python REPL session (AIO_CODE_BACKEND=native), and /v1/jupyter needs a kernel: use another session_id, or delete this one first", call.SessionID)}
	}
	if created && call.OnCreate != nil {
		call.OnCreate(sess)
	}
	return sess, created, nil
}

// Sessions returns tenant's sessions named id: of language lang, or of
// every language when lang is "".
func (c *Core) Sessions(tenant, lang, id string) []*stream.Session {
	var out []*stream.Session
	for _, l := range Languages {
		if lang != "" && l != lang {
			continue
		}
		if s := c.Reg.Get(tenant, l, id); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// Workspace is where runtimes start (--workdir, else "/"), as an absolute
// path; uploads without a path land there too.
func (c *Core) Workspace() string { return c.workspace }

// View is where the file plane acts for tenant: the tenant's view with its
// rights (its file helper), the --runtime-user's rights on the host, or
// the host with aiod's own (fsview.HostFS).
func (c *Core) View(tenant string) (fsview.FS, error) {
	f, err := c.RT.Files(tenant)
	if err != nil {
		return nil, err
	}
	if f == nil {
		return c.hostFS, nil
	}
	return f, nil
}

// ViewOf is View for the request's caller.
func (c *Core) ViewOf(ctx *fasthttp.RequestCtx) (fsview.FS, error) { return c.View(Tenant(ctx)) }

// TempDir is the temporary folder runtimes see: the tenant's /tmp under
// tenant isolation, else aiod's own.
func (c *Core) TempDir() string {
	if c.RT.Tenanted() {
		return "/tmp"
	}
	return os.TempDir()
}
