package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

// ErrSessionClosed is returned by Execute on a session that was deleted or
// reclaimed before the call got its turn.
var ErrSessionClosed = errors.New("session closed")

// StartError wraps a failure to start a runtime (no interpreter, kernel
// start deadline passed, ...). Routes answer it with 503.
type StartError struct{ Err error }

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Backend says how one language's runtimes are started and how long an
// unused session of that kind lives.
type Backend struct {
	Name     string        // "kernel", "native" or "jupyter"
	Language string        // "python" or "javascript"
	Spec     string        // the kernelspec its kernels start from, when known
	Cwd      string        // the folder its runtimes start in; "" the configured one
	Idle     time.Duration // reclaim after this long unused; 0 never
	Start    func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error)
}

// ExecRequest is one call to Session.Execute.
type ExecRequest struct {
	Code    string
	Timeout time.Duration // counted from the call's arrival, queueing included
	Origin  any           // who started it, carried into its events (comparable); nil for none
	Subs    []Subscriber  // extra subscribers of this execution only
}

// Why a session was closed, as Close records it.
const (
	ClosedDeleted  = "deleted"
	ClosedIdle     = "idle"
	ClosedShutdown = "shutdown"
	ClosedReleased = "released" // a temporary session after its call
)

// Session is one named runtime, keyed by (language, id), or a temporary one
// for a one-shot call. Calls run one at a time in arrival order; the runtime
// is started on first use and again, fresh, after it died or was restarted.
type Session struct {
	ID       string // "" for a temporary session
	Language string
	Backend  Backend
	Created  time.Time
	// KernelID is the session's id as a Jupyter kernel (a lowercase UUID):
	// its ID when that is a UUID no other session uses, else one of its own.
	// "" for temporary sessions.
	KernelID string

	reg    *Registry
	mux    *Mux
	turn   chan struct{} // holding a slot means running; FIFO by channel order
	closed chan struct{}
	once   sync.Once

	mu         sync.Mutex // guards below
	rt         jupyter.Runtime
	gen        uint64
	lost       string // why earlier state is gone; the next answer says so
	dead       bool   // the last runtime died (or none could start) and no other runs yet
	restarting bool
	closeWhy   string // set once, by Close
	last       time.Time
	pending    int           // calls running or queued
	attached   int           // front ends attached (Attach)
	idle       time.Duration // reclaim after this long unused; starts as Backend.Idle
	cwd        string        // the folder the runtime was last told to work in; "" its start folder
}

// Idle is how long the session may stay unused before it is reclaimed
// (0: never).
func (s *Session) Idle() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idle
}

// SetIdle changes how long the session may stay unused.
func (s *Session) SetIdle(d time.Duration) {
	s.mu.Lock()
	s.idle = d
	s.mu.Unlock()
}

// Cwd is the folder the session's runtime was last told to work in ("" for
// the one it started in).
func (s *Session) Cwd() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cwd
}

// SetCwd records the folder the session's runtime now works in.
func (s *Session) SetCwd(dir string) {
	s.mu.Lock()
	s.cwd = dir
	s.mu.Unlock()
}

// Mux is the session's multiplexer, for watchers.
func (s *Session) Mux() *Mux { return s.mux }

// Busy reports whether a call is running or queued.
func (s *Session) Busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending > 0
}

// LastUsed is when a call last entered or left the session.
func (s *Session) LastUsed() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Runtime returns the current runtime, or nil when none runs.
func (s *Session) Runtime() jupyter.Runtime {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rt
}

// State is the session's execution state as Jupyter reports a kernel's:
// "restarting" during Restart; "dead" when its runtime died (or could not
// start) and no other runs yet; "busy" while a call runs or queues or the
// runtime says it is busy; else "idle".
func (s *Session) State() string {
	s.mu.Lock()
	rt, dead, restarting, busy := s.rt, s.dead, s.restarting, s.pending > 0
	s.mu.Unlock()
	switch {
	case restarting:
		return jupyter.StateRestarting
	case rt != nil && isDone(rt) && isDeath(rt.Err()):
		return jupyter.StateDead
	case rt == nil && dead:
		return jupyter.StateDead
	case busy || s.mux.State() == jupyter.StateBusy:
		return jupyter.StateBusy
	}
	return jupyter.StateIdle
}

func isDone(rt jupyter.Runtime) bool {
	select {
	case <-rt.Done():
		return true
	default:
		return false
	}
}

func isDeath(err error) bool { return deadError(err) != nil }

func deadError(err error) *jupyter.DeadError {
	var d *jupyter.DeadError
	if errors.As(err, &d) {
		return d
	}
	return nil
}

// Attach records a front end attached to the session (a Jupyter channels
// socket): the idle reaper leaves the session alone until every detach
// function returned was called.
func (s *Session) Attach() (detach func()) {
	s.mu.Lock()
	s.attached++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.attached--
			s.last = time.Now()
			s.mu.Unlock()
		})
	}
}

// Attached is the number of front ends attached.
func (s *Session) Attached() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attached
}

// reapable reports whether the session has been unused past its idle limit.
func (s *Session) reapable(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idle > 0 && s.pending == 0 && s.attached == 0 && now.Sub(s.last) > s.idle
}

func (s *Session) enter() {
	s.mu.Lock()
	s.pending++
	s.last = time.Now()
	s.mu.Unlock()
}

func (s *Session) leave() {
	s.mu.Lock()
	s.pending--
	s.last = time.Now()
	s.mu.Unlock()
}

// Execute runs code and returns its result. The error is nil whenever the
// code ran (or timed out, or its runtime died, or ctx ended while it ran):
// those are results. It is non-nil only when the code could not run at
// all: *StartError, ErrSessionClosed, or ctx ending while the call waited
// for its turn.
func (s *Session) Execute(ctx context.Context, req ExecRequest) (*Result, error) {
	arrival := time.Now()
	s.enter()
	defer s.leave()
	res := &Result{ID: jupyter.NewID(), Code: req.Code, Language: s.Language, SessionID: s.ID}
	deadline := time.NewTimer(req.Timeout)
	defer deadline.Stop()
	select {
	case s.turn <- struct{}{}:
	case <-deadline.C:
		res.Status = StatusTimeout
		res.note(fmt.Sprintf("timed out after %s waiting behind the session's earlier calls; the code did not run", req.Timeout))
		s.reg.executed(s, res, -1)
		return res, nil
	case <-s.closed:
		return nil, ErrSessionClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.turn }()

	waited := time.Since(arrival)
	rt, gen, err := s.runtime(ctx, res)
	if err != nil {
		return nil, err
	}
	// Starting a runtime does not count against the code's timeout.
	deadline.Stop()
	deadline.Reset(max(req.Timeout-waited, time.Millisecond))

	ex := s.mux.Begin(res.ID, req.Origin, s.reg.cfg.Budget, req.Subs...)
	defer s.mux.End(ex)
	began := time.Now()
	defer func() { s.reg.executed(s, res, time.Since(began)) }()
	if err := rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: res.ID, Code: req.Code}); err != nil {
		s.discard(rt, gen, "sending to it failed: "+err.Error())
		res.Status = StatusError
		res.note("send execute request: " + err.Error())
	} else {
		s.wait(ctx, ex, rt, gen, deadline, req.Timeout, res)
	}
	s.finish(ex, res)
	s.mux.publishResult(ex, res)
	return res, nil
}

// runtime returns the live runtime, starting a fresh one when needed; the
// start is bounded by ctx too.
func (s *Session) runtime(ctx context.Context, res *Result) (jupyter.Runtime, uint64, error) {
	s.mu.Lock()
	rt, gen := s.rt, s.gen
	s.mu.Unlock()
	if rt != nil {
		if !isDone(rt) {
			res.Runtime = rt.Info()
			return rt, gen, nil
		}
		s.discard(rt, gen, fmt.Sprintf("the %s died while idle (%v)", s.kind(), rt.Err()))
	}
	rt, gen, err := s.start(ctx)
	if err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	lost := s.lost
	s.lost = ""
	s.mu.Unlock()
	if lost != "" {
		res.Fresh = true
		res.note(fmt.Sprintf("this call ran in a fresh %s because %s; earlier state is gone", s.kind(), lost))
	}
	res.Runtime = rt.Info()
	return rt, gen, nil
}

// start starts a runtime and installs it; the caller holds the turn. The
// start ends when ctx or the registry ends, or the session is closed.
func (s *Session) start(ctx context.Context) (jupyter.Runtime, uint64, error) {
	gen := s.mux.NextGen()
	sctx, cancel := context.WithCancel(s.reg.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	sctx, how := withStartMode(sctx)
	began := time.Now()
	rt, err := s.Backend.Start(sctx, s.mux.Handler(gen))
	s.reg.started(s, how.mode(), time.Since(began), err)
	if err != nil {
		s.mu.Lock()
		s.dead = s.rt == nil
		s.mu.Unlock()
		return nil, 0, &StartError{Err: err}
	}
	s.mu.Lock()
	select {
	case <-s.closed:
		s.mu.Unlock()
		s.reg.closeRuntime(rt)
		return nil, 0, ErrSessionClosed
	default:
	}
	s.rt, s.gen, s.dead = rt, gen, false
	s.cwd = s.Backend.Cwd // a fresh runtime works where its backend starts it
	s.last = time.Now()
	s.mu.Unlock()
	s.reg.watchDeath(s, rt)
	return rt, gen, nil
}

func (s *Session) kind() string {
	if s.Backend.Name == "native" {
		return s.Language + " process"
	}
	return "kernel"
}

// discard drops rt if it is still the session's runtime, remembers why
// state was lost, and closes it in the background.
func (s *Session) discard(rt jupyter.Runtime, gen uint64, why string) {
	s.mu.Lock()
	if s.rt == rt && s.gen == gen {
		s.rt = nil
		s.dead = isDone(rt) && isDeath(rt.Err())
		if s.ID != "" {
			s.lost = why
		}
	}
	s.mu.Unlock()
	s.reg.closeRuntime(rt)
}

// wait blocks until the execution completes, times out, its runtime dies
// or ctx ends. Once one of reply and idle has arrived, the other is waited
// for while messages keep coming (iopub can trail the shell by seconds
// during a flood) and for CompletionGrace after the last one.
func (s *Session) wait(ctx context.Context, ex *Execution, rt jupyter.Runtime, gen uint64, deadline *time.Timer, timeout time.Duration, res *Result) {
	replied, idled := ex.replied, ex.idled
	var grace *time.Timer
	var graceC <-chan time.Time
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for replied != nil || idled != nil {
		select {
		case <-replied:
			replied = nil
		case <-idled:
			idled = nil
		case <-ex.activity:
			if grace != nil {
				grace.Reset(s.reg.cfg.CompletionGrace)
			}
			continue
		case <-graceC:
			if ex.folding.Load() > 0 { // still folding a message: not lost
				grace.Reset(s.reg.cfg.CompletionGrace)
				continue
			}
			res.note("the runtime's closing status message was lost; outputs may be incomplete")
			return
		case <-rt.Done():
			s.died(rt, gen, res)
			return
		case <-deadline.C:
			res.Status = StatusTimeout
			s.stop(ex, rt, gen, res, fmt.Sprintf("execution timed out after %s", timeout), "a timeout")
			return
		case <-ctx.Done():
			res.Status = StatusError
			s.stop(ex, rt, gen, res, fmt.Sprintf("the call was cancelled (%v)", context.Cause(ctx)), "a cancelled call")
			return
		}
		if grace == nil && (replied == nil) != (idled == nil) {
			grace = time.NewTimer(s.reg.cfg.CompletionGrace)
			graceC = grace.C
		}
	}
}

// closedNote says what happened to a call whose session was closed under it.
func closedNote(why string) string {
	switch why {
	case ClosedShutdown:
		return "aiod shut down while the code ran"
	case ClosedIdle:
		return "the session was reclaimed while the code ran"
	}
	return "the session was deleted while the code ran"
}

func (s *Session) died(rt jupyter.Runtime, gen uint64, res *Result) {
	res.Status = StatusError
	select {
	case <-s.closed:
		s.mu.Lock()
		why := s.closeWhy
		s.mu.Unlock()
		res.note(closedNote(why))
		s.discard(rt, gen, "the session was deleted")
		return
	default:
	}
	cause := rt.Err()
	s.discard(rt, gen, fmt.Sprintf("the previous %s died (%v)", s.kind(), cause))
	msg := fmt.Sprintf("the %s died during execution: %v", s.kind(), cause)
	if s.ID != "" {
		msg += "; the next call on this session starts a fresh one"
	}
	res.note(msg)
}

// stop interrupts the running code after a timeout or a cancelled call
// (what says which, after names it); when the interrupt fails the runtime
// is restarted.
func (s *Session) stop(ex *Execution, rt jupyter.Runtime, gen uint64, res *Result, what, after string) {
	grace := s.reg.cfg.InterruptGrace
	ctx, cancel := context.WithTimeout(s.reg.ctx, grace)
	defer cancel()
	// The interrupt is repeated: one that lands before the code starts is
	// ignored by ipykernel. Idle ends the wait even without a reply, since an
	// interrupt caught in IPython's own code publishes idle and no reply.
	again := time.NewTicker(300 * time.Millisecond)
	defer again.Stop()
	ierr := rt.Interrupt(ctx)
	for ierr == nil {
		select {
		case <-ex.idled:
		case <-again.C:
			if err := rt.Interrupt(ctx); err != nil && ctx.Err() == nil {
				ierr = err
			}
			continue
		case <-rt.Done():
			ierr = rt.Err()
			continue
		case <-ctx.Done():
			ierr = fmt.Errorf("no answer within %s", grace)
			continue
		}
		break
	}
	if ierr == nil {
		if s.ID != "" {
			res.note(what + "; it was interrupted and the session kept its state")
		} else {
			res.note(what + " and was interrupted")
		}
		return
	}
	s.discard(rt, gen, fmt.Sprintf("it was restarted after %s (interrupt failed: %v)", after, ierr))
	msg := fmt.Sprintf("%s; the interrupt failed (%v), so the %s was restarted", what, ierr, s.kind())
	if s.ID != "" {
		msg += ": session state was lost"
	}
	res.note(msg)
}

// finish copies the execution's outcome into res.
func (s *Session) finish(ex *Execution, res *Result) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	res.Outputs = ex.col.Finish()
	res.Truncated = ex.col.Truncated()
	if res.Truncated {
		s.reg.counters.Count(OutputTruncate, "", 1)
	}
	if n := ex.col.Note(); n != "" {
		res.note(n)
	}
	if ex.gotR {
		res.ExecutionCount = ex.reply.ExecutionCount
	}
	if res.Status != "" {
		return
	}
	switch {
	case ex.gotR && ex.reply.Status == "ok":
		res.Status = StatusOK
	case ex.gotR && ex.reply.Status == "aborted":
		res.Status = StatusError
		res.note("execution was aborted by the runtime")
	case ex.gotR || res.FirstError() != nil:
		res.Status = StatusError
	default:
		res.Status = StatusOK
	}
	if res.Status == StatusError {
		if e := res.FirstError(); e != nil {
			res.Notes = append([]string{"execution raised " + e.Ename + ": " + e.Evalue}, res.Notes...)
		} else if ex.gotR && ex.reply.Ename != "" {
			res.Notes = append([]string{"execution raised " + ex.reply.Ename + ": " + ex.reply.Evalue}, res.Notes...)
		}
	}
}

// Interrupt interrupts the code running in the session, if any.
func (s *Session) Interrupt(ctx context.Context) error {
	rt := s.Runtime()
	if rt == nil {
		return nil
	}
	return rt.Interrupt(ctx)
}

// Close ends the session and its runtime, recording why (ClosedDeleted,
// ...); a call in flight ends with an error result. Idempotent: the first
// reason is kept.
func (s *Session) Close(ctx context.Context, why string) {
	s.once.Do(func() {
		s.mu.Lock()
		s.closeWhy = why
		s.mu.Unlock()
		close(s.closed)
	})
	s.mu.Lock()
	rt := s.rt
	s.rt = nil
	s.mu.Unlock()
	if rt != nil {
		_ = rt.Close(ctx)
	}
}
