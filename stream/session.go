package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
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
	Run     string                 // what the runtime gets when it is not Code (Code wrapped); "" is Code
	Timeout time.Duration          // counted from the call's arrival, queueing included
	Origin  any                    // who started it, carried into its events (comparable); nil for none
	Subs    []execution.Subscriber // extra subscribers of this execution only
	// Record is the execution's entry in the registry's store, claimed by
	// the caller (execution.Store.Claim); nil makes Execute claim a fresh one.
	// Whoever claims it makes sure it finishes: Execute does when the code
	// ran (or timed out) and when it made the record; otherwise the caller
	// calls Record.Fail when Execute returns an error.
	Record *execution.Record
	// Warnings are what the caller should know about its request (fields
	// ignored, ...); they are copied into the result.
	Warnings []string
}

// Why a session was closed, as Close records it.
const (
	ClosedDeleted  = "deleted"
	ClosedIdle     = "idle"
	ClosedShutdown = "shutdown"
	ClosedReleased = "released" // a temporary session after its call
	ClosedRefused  = "refused"  // a new session whose first start an admission limit refused
)

// Session is one named runtime, keyed by (tenant, language, id), or a
// temporary one for a one-shot call. Calls run one at a time in arrival
// order; the runtime is started on first use and again, fresh, after it
// died or was restarted.
type Session struct {
	ID       string // "" for a temporary session
	Tenant   string // whose session it is (guard.Caller.Tenant); its executions are the tenant's too
	Language string
	Backend  Backend
	Created  time.Time
	// KernelID is the session's id as a Jupyter kernel (a lowercase UUID):
	// its ID when that is a UUID no other session uses, else one of its own.
	// "" for temporary sessions.
	KernelID string

	reg     *Registry
	owner   string // the caller key it counts against (Registry.mu)
	counted bool   // it counts against the session caps now (Registry.mu)
	mux     *Mux
	turns   turnstile // holding the turn means running; given in arrival order
	closed  chan struct{}
	once    sync.Once

	mu         sync.Mutex      // guards below
	rt         jupyter.Runtime // set through setRuntimeLocked only
	hasRT      atomic.Bool     // rt != nil, read without mu (Registry.HeldBytes)
	rtChanged  chan struct{}   // closed when rt changes; made by RuntimeChanges, nil when nobody waits
	gen        uint64
	lost       string // why earlier state is gone; the next answer says so
	dead       bool   // the last runtime died (or none could start) and no other runs yet
	restarting bool
	restartBy  string     // who asked for the restart in progress ("" none)
	cur        *Execution // the execution running now (Execute's), or nil
	closeWhy   string     // set once, by Close
	last       time.Time
	pending    int                 // calls running or queued
	attached   int                 // front ends attached (Attach)
	idle       time.Duration       // reclaim after this long unused; starts as Backend.Idle
	cwd        string              // the folder the runtime was last told to work in; "" its start folder
	folderTurn chan struct{}       // held by a call that names a folder, from its change of folder to its end (FolderTurn)
	running    *execution.Record   // the execution running now
	told       *execution.Result   // a restore (or its failure) the next call's answer reports (EnsureRuntime)
	queued     []*execution.Record // executions waiting for their turn, in arrival order
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

// FolderTurn waits, within ctx, until no other call that names a working
// folder is between its change of folder and its end, and holds that turn
// until release: two calls with their own cwd on one session each run in
// their own folder, never one in the other's.
func (s *Session) FolderTurn(ctx context.Context) (release func(), err error) {
	select {
	case s.folderTurn <- struct{}{}:
		return func() { <-s.folderTurn }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-s.closed:
		return nil, ErrSessionClosed
	}
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

// RuntimeChanges returns the current runtime (nil when none runs) and a
// channel closed when that changes: a runtime installed by a start or a
// restart, or dropped (it died and was discarded, a restart began, the
// session closed). A runtime that dies stays current until then: watch
// its Done too.
func (s *Session) RuntimeChanges() (jupyter.Runtime, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rtChanged == nil {
		s.rtChanged = make(chan struct{})
	}
	return s.rt, s.rtChanged
}

// setRuntimeLocked makes rt (nil: none) the current runtime and wakes
// whoever waits on RuntimeChanges. s.mu is held.
func (s *Session) setRuntimeLocked(rt jupyter.Runtime) {
	if rt == s.rt {
		return
	}
	s.rt = rt
	s.hasRT.Store(rt != nil)
	if s.rtChanged != nil {
		close(s.rtChanged)
		s.rtChanged = nil
	}
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

// everStarted reports whether a runtime was ever installed in s.
func (s *Session) everStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen != 0 || s.rt != nil
}

// reclaimIn is how long until the idle reaper may reclaim s, if nothing
// uses it; ok is false when it is in use or never reclaimed.
func (s *Session) reclaimIn(now time.Time) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle <= 0 || s.pending > 0 || s.attached > 0 {
		return 0, false
	}
	return s.idle - now.Sub(s.last) + s.reg.cfg.ReapInterval, true
}

// enter counts rec as arrived and puts it in line for the turn, in one
// step: calls take their turns in the order they arrived.
func (s *Session) enter(rec *execution.Record) *ticket {
	rec.Enter(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending++
	s.queued = append(s.queued, rec)
	s.last = time.Now()
	return s.turns.join()
}

// begin moves rec from the queue to running.
func (s *Session) begin(rec *execution.Record) {
	s.mu.Lock()
	s.unqueueLocked(rec)
	s.running = rec
	s.mu.Unlock()
}

func (s *Session) unqueueLocked(rec *execution.Record) {
	for i, q := range s.queued {
		if q == rec {
			s.queued = append(s.queued[:i:i], s.queued[i+1:]...)
			return
		}
	}
}

func (s *Session) leave(rec *execution.Record) {
	s.mu.Lock()
	s.pending--
	s.unqueueLocked(rec)
	if s.running == rec {
		s.running = nil
	}
	s.last = time.Now()
	s.mu.Unlock()
}

// Activity is what the session runs now and what waits behind it.
func (s *Session) Activity() (running *execution.View, queued []execution.View) {
	s.mu.Lock()
	rec, q := s.running, append([]*execution.Record(nil), s.queued...)
	s.mu.Unlock()
	if rec != nil {
		v := rec.View()
		running = &v
	}
	for _, r := range q {
		queued = append(queued, r.View())
	}
	return running, queued
}

// Execute runs code and returns its result. The error is nil whenever the
// code ran (or timed out, or its runtime died, or ctx ended while it ran):
// those are results. It is non-nil only when the code could not run at
// all: *StartError, ErrSessionClosed, or ctx ending while the call waited
// for its turn.
func (s *Session) Execute(ctx context.Context, req ExecRequest) (res *execution.Result, err error) {
	arrival := time.Now()
	rec := req.Record
	if rec == nil {
		if rec, _, err = s.reg.execs.Claim(s.Tenant, "", execution.Key{Language: s.Language, SessionID: s.ID, Code: req.Code}); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				rec.Fail(err)
			}
		}()
	}
	turn := s.enter(rec)
	defer s.leave(rec)
	defer turn.done()
	res = &execution.Result{ID: jupyter.NewID(), ExecutionID: rec.ID, Code: req.Code, Language: s.Language, SessionID: s.ID, Warnings: req.Warnings}
	deadline := time.NewTimer(req.Timeout)
	defer deadline.Stop()
	select {
	case <-turn.ready:
	case <-deadline.C:
		res.Status, res.Queued, res.ErrorKind = execution.StatusTimeout, time.Since(arrival), execution.KindTimeout
		res.Note(fmt.Sprintf("timed out after %s waiting behind the session's earlier calls; the code did not run", req.Timeout))
		rec.Deliver(execution.Event{ExecutionID: rec.ID, Result: res})
		s.reg.executed(s, res, -1)
		return res, nil
	case <-rec.Cancelled():
		res.Status, res.Queued, res.ErrorKind = execution.StatusError, time.Since(arrival), execution.KindInterrupted
		res.Note(fmt.Sprintf("execution was interrupted by %s while it waited behind the session's earlier calls; the code did not run", rec.DroppedBy()))
		rec.Deliver(execution.Event{ExecutionID: rec.ID, Result: res})
		s.reg.executed(s, res, -1)
		return res, nil
	case <-s.closed:
		return nil, ErrSessionClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}

	waited := time.Since(arrival)
	res.Queued = waited
	s.begin(rec)
	rec.Started(waited)
	rt, gen, err := s.runtime(ctx, res)
	if err != nil {
		return nil, err
	}
	// Starting a runtime does not count against the code's timeout.
	deadline.Stop()
	deadline.Reset(max(req.Timeout-waited, time.Millisecond))

	ex := s.mux.Begin(res.ID, rec.ID, req.Origin, s.reg.cfg.Budget, append(req.Subs, rec)...)
	defer s.mux.End(ex)
	s.setCurrent(ex)
	defer s.setCurrent(nil)
	began := time.Now()
	defer func() { s.reg.executed(s, res, time.Since(began)) }()
	run := req.Code
	if req.Run != "" {
		run = req.Run
	}
	err = rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: res.ID, Code: run})
	if err != nil && ctx.Err() == nil {
		// The request never reached the runtime (it died just before,
		// unseen yet, or was cut for a write that did not end): the code
		// did not run, so it runs once in a fresh runtime, which the
		// result's notes report.
		s.discard(rt, gen, "sending to it failed: "+err.Error())
		if rt2, gen2, serr := s.runtime(ctx, res); serr != nil {
			err, rt = fmt.Errorf("%w; then a fresh runtime could not start: %w", err, serr), nil
		} else {
			rt, gen = rt2, gen2
			err = rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: res.ID, Code: run})
		}
	}
	if err != nil {
		if rt != nil {
			s.discard(rt, gen, "sending to it failed: "+err.Error())
		}
		res.Status, res.ErrorKind = execution.StatusError, execution.KindDied
		res.Note("send execute request: " + err.Error())
	} else {
		s.wait(ctx, ex, rt, gen, deadline, req.Timeout, res)
	}
	s.finish(ex, res)
	s.mux.publishResult(ex, res)
	return res, nil
}

// runtime returns the live runtime, starting a fresh one when needed; the
// start is bounded by ctx too.
func (s *Session) runtime(ctx context.Context, res *execution.Result) (jupyter.Runtime, uint64, error) {
	s.mu.Lock()
	rt, gen := s.rt, s.gen
	s.mu.Unlock()
	if rt != nil && isDone(rt) {
		s.discard(rt, gen, fmt.Sprintf("the %s died while idle (%v)", s.kind(), rt.Err()))
		rt = nil
	}
	started := false
	if rt == nil {
		var err error
		if rt, gen, err = s.start(ctx); err != nil {
			return nil, 0, err
		}
		started = true
	}
	// A loss is reported to the first call after it, whoever started the
	// runtime this call runs in (this call, a restart, a front end).
	s.mu.Lock()
	lost := s.lost
	s.lost = ""
	s.mu.Unlock()
	restored := false
	if started && s.ID != "" && s.reg.cfg.Snapshots != nil {
		restored = s.restore(ctx, rt, gen, res, lost)
	}
	s.mu.Lock()
	told := s.told
	s.told = nil
	s.mu.Unlock()
	if told != nil && !started {
		res.Restored, res.Skipped, res.Fresh = told.Restored, told.Skipped, told.Fresh
		res.Notes = append(res.Notes, told.Notes...)
		restored = true
	}
	if lost != "" && !restored {
		res.Fresh = true
		res.Note(fmt.Sprintf("this call ran in a fresh %s because %s; earlier state is gone", s.kind(), lost))
	}
	res.Runtime = rt.Info()
	return rt, gen, nil
}

// logLoss logs, at info, an event that cost a named session its state.
func (s *Session) logLoss(msg, reason string) {
	if s.ID != "" {
		s.reg.cfg.Logger.Info(msg, "session", s.ID, "language", s.Language, "backend", s.Backend.Name, "reason", reason)
	}
}

func (s *Session) setCurrent(ex *Execution) {
	s.mu.Lock()
	s.cur = ex
	s.mu.Unlock()
}

// start starts a runtime and installs it; the caller holds the turn. The
// start ends when ctx or the registry ends, or the session is closed.
func (s *Session) start(ctx context.Context) (jupyter.Runtime, uint64, error) {
	gen := s.mux.NextGen()
	sctx, cancel := context.WithCancel(s.reg.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	// A session closed while its runtime starts (DELETE, reclaim) ends
	// the start too: a tenant's slow startup code must not keep running
	// for --kernel-start-timeout after the session, and its admission
	// slot, are gone.
	started := sctx.Done() // sctx is rebound below
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-started:
		}
	}()
	release, err := s.reg.gate.acquire(sctx, s.Tenant)
	if err != nil {
		if le, ok := err.(*LimitError); ok {
			s.reg.counters.Count(AdmissionRejects, le.Reason, 1)
			if s.ID != "" && !s.everStarted() {
				// Refused before it ever ran: the session is not kept
				// (it would hold a slot of the session cap for nothing).
				s.reg.remove(s.reg.ctx, func(x *Session) bool { return x == s }, ClosedRefused)
			}
			return nil, 0, le
		}
		return nil, 0, &StartError{Err: err}
	}
	// The slot is given back once the start says its runtime no longer
	// needs it (jupyter.Launched: kernels and REPLs hold it through their
	// own start-up only while that keeps a CPU busy), or when it returns.
	release = sync.OnceFunc(release)
	sctx, how := withStartMode(jupyter.WithLaunched(sctx, release))
	began := time.Now()
	rt, err := s.Backend.Start(sctx, s.mux.Handler(gen))
	release()
	s.reg.started(s, how.mode(), time.Since(began), err)
	if err != nil {
		s.mu.Lock()
		s.dead = s.rt == nil
		s.mu.Unlock()
		select {
		case <-s.closed:
			return nil, 0, ErrSessionClosed
		default:
		}
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
	s.setRuntimeLocked(rt)
	s.gen, s.dead = gen, false
	s.cwd = s.Backend.Cwd // a fresh runtime works where its backend starts it
	s.last = time.Now()
	s.mu.Unlock()
	s.reg.afterDoneUnlessClosed(rt, func() { s.watchDeath(rt) })
	return rt, gen, nil
}

// watchDeath counts the death of a session's runtime by cause and logs, at
// info, that of a named session's runtime when it
// happens (not when it is closed on purpose), running or idle. It runs
// once the runtime has ended, which Close and every restart bring about.
func (s *Session) watchDeath(rt jupyter.Runtime) {
	err := rt.Err()
	if !isDeath(err) {
		return
	}
	s.reg.counters.Count(RuntimeDeaths, Labels(s.Language, DeathCause(err)), 1)
	if s.ID == "" {
		return
	}
	s.mu.Lock()
	running := s.cur != nil && s.rt == rt
	s.mu.Unlock()
	when := "while idle"
	if running {
		when = "during execution"
	}
	s.logLoss("runtime died", fmt.Sprintf("the %s died %s: %v", s.kind(), when, rt.Err()))
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
		s.setRuntimeLocked(nil)
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
// during a flood) and for CompletionGrace after the last one, or after the
// last byte of one still arriving, when the runtime counts them.
func (s *Session) wait(ctx context.Context, ex *Execution, rt jupyter.Runtime, gen uint64, deadline *time.Timer, timeout time.Duration, res *execution.Result) {
	replied, idled := ex.replied, ex.idled
	var grace *time.Timer
	var graceC <-chan time.Time
	var lastReceived uint64 // received(rt) when grace last began
	// A client's interrupt that the runtime shows no sign of (no message
	// at all) within InterruptGrace is handled as a timeout's: repeated,
	// then the runtime is restarted. A native Node.js REPL busy in a
	// synchronous loop was seen, on a loaded machine, to ignore a SIGINT.
	var ignored *time.Timer
	var ignoredC <-chan time.Time
	var signsAtAsk uint64
	defer func() {
		if grace != nil {
			grace.Stop()
		}
		if ignored != nil {
			ignored.Stop()
		}
	}()
	for replied != nil || idled != nil {
		// Activity matters only to the completion grace and to an
		// interrupt's: listening to it always would wake this goroutine
		// at every message of every execution.
		var activity <-chan struct{}
		if grace != nil || ignored != nil {
			activity = ex.activity
		}
		select {
		case <-replied:
			replied = nil
		case <-idled:
			idled = nil
		case <-activity:
			if grace != nil {
				grace.Reset(s.reg.cfg.CompletionGrace)
			}
			if ignored != nil && ex.signs.Load() != signsAtAsk {
				ignored.Stop() // the runtime reacts: the interrupt is in its hands
				ignored, ignoredC = nil, nil
			}
			continue
		case <-ex.asked:
			if ignored == nil {
				drainPoke(ex.activity) // a poke from before the ask is no sign of it
				signsAtAsk = ex.signs.Load()
				ignored = time.NewTimer(s.reg.cfg.InterruptGrace)
				ignoredC = ignored.C
			}
			continue
		case <-ignoredC:
			if ended(replied) || ended(idled) {
				// It ended as the timer fired: a sign after all. Another
				// interrupt now could land in the runtime's next cell.
				ignored, ignoredC = nil, nil
				continue
			}
			ex.mu.Lock()
			by := ex.interruptBy
			ex.mu.Unlock()
			res.Status, res.ErrorKind = execution.StatusError, execution.KindInterrupted
			s.stop(ex, rt, gen, res, fmt.Sprintf("execution was interrupted by %s, but the runtime showed no sign of it within %s", by, s.reg.cfg.InterruptGrace), by)
			return
		case <-graceC:
			// Still folding a message, or one still arriving (a flood's
			// message of megabytes on a loaded machine): not lost.
			if n := received(rt); ex.folding.Load() > 0 || n != lastReceived {
				lastReceived = n
				grace.Reset(s.reg.cfg.CompletionGrace)
				continue
			}
			if replied != nil {
				// Idle without a reply (ipykernel 6.17 does that for code
				// it cannot take): nothing says the code ran.
				res.Status, res.ErrorKind = execution.StatusError, execution.KindNoReply
				res.Note(fmt.Sprintf("the %s went idle but sent no reply to the execution within %s: whether the code ran is unknown", s.kind(), s.reg.cfg.CompletionGrace))
				return
			}
			res.Note("the runtime's closing status message was lost; outputs may be incomplete")
			return
		case <-rt.Done():
			s.died(rt, gen, res)
			return
		case <-deadline.C:
			res.Status, res.ErrorKind = execution.StatusTimeout, execution.KindTimeout
			s.stop(ex, rt, gen, res, fmt.Sprintf("execution timed out after %s", timeout), "a timeout")
			return
		case <-ctx.Done():
			res.Status, res.ErrorKind = execution.StatusError, execution.KindInterrupted
			s.stop(ex, rt, gen, res, fmt.Sprintf("the call was cancelled (%v)", context.Cause(ctx)), "a cancelled call")
			return
		}
		if grace == nil && (replied == nil) != (idled == nil) {
			drainPoke(ex.activity)
			lastReceived = received(rt)
			grace = time.NewTimer(s.reg.cfg.CompletionGrace)
			graceC = grace.C
		}
	}
}

// ended says whether c, one of an execution's completion signals that wait
// has not seen yet, is closed; nil means wait has.
func ended(c <-chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// received is what rt (or the runtime it wraps) has received so far, when
// it counts it (a local kernel: the bytes read from its shell and iopub
// sockets); 0 otherwise.
func received(rt jupyter.Runtime) uint64 {
	if p, ok := jupyter.Find[interface{ Received() uint64 }](rt); ok {
		return p.Received()
	}
	return 0
}

// drainPoke empties a poke channel.
func drainPoke(c <-chan struct{}) {
	select {
	case <-c:
	default:
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

func (s *Session) died(rt jupyter.Runtime, gen uint64, res *execution.Result) {
	res.Status, res.ErrorKind = execution.StatusError, execution.KindInterrupted
	select {
	case <-s.closed:
		s.mu.Lock()
		why := s.closeWhy
		s.mu.Unlock()
		res.Note(closedNote(why))
		if why == ClosedShutdown {
			res.ErrorKind = execution.KindDaemonRestarted
		}
		s.discard(rt, gen, "the session was deleted")
		return
	default:
	}
	s.mu.Lock()
	by := s.restartBy
	s.mu.Unlock()
	if by != "" {
		// Restart closed the runtime under this call; it installs the
		// next one and reports the loss itself.
		s.discard(rt, gen, "")
		res.Note(fmt.Sprintf("the %s was restarted by %s during execution; session state was lost", s.kind(), by))
		return
	}
	cause := rt.Err()
	res.ErrorKind = execution.KindDied
	msg := fmt.Sprintf("the %s died during execution: %v", s.kind(), cause)
	lost := fmt.Sprintf("the previous %s died (%v)", s.kind(), cause)
	if d := deadError(cause); d != nil && d.Kind == jupyter.DeathOutOfMemory {
		res.ErrorKind = execution.KindOutOfMemory
		msg = fmt.Sprintf("the %s was killed by its memory limit (%s) during execution; the session's state was lost", s.kind(), d.Limit)
		lost = fmt.Sprintf("the previous %s was killed by its memory limit (%s)", s.kind(), d.Limit)
	}
	s.discard(rt, gen, lost)
	if s.ID != "" {
		msg += "; the next call on this session starts a fresh one"
	}
	res.Note(msg)
}

// stop interrupts the running code after a timeout or a cancelled call
// (what says which, after names it); when the interrupt fails the runtime
// is restarted.
func (s *Session) stop(ex *Execution, rt jupyter.Runtime, gen uint64, res *execution.Result, what, after string) {
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
	ex.interrupted(after)
	res.InterruptedBy = after
	if ierr == nil && s.ranToTheEnd(ex) {
		// The code finished as the interrupt was sent (a timeout of a
		// millisecond, a client's late interrupt): say what happened.
		res.Status, res.ErrorKind, res.InterruptedBy = execution.StatusOK, "", ""
		res.Note(what + ", but the code had run to its end before the interrupt reached it")
		return
	}
	if ierr == nil {
		if s.ID != "" {
			res.Note(what + "; it was interrupted and the session kept its state")
		} else {
			res.Note(what + " and was interrupted")
		}
		return
	}
	why := fmt.Sprintf("it was restarted after %s (interrupt failed: %v)", after, ierr)
	s.logLoss("runtime restarted", why)
	s.discard(rt, gen, why)
	msg := fmt.Sprintf("%s; the interrupt failed (%v), so the %s was restarted", what, ierr, s.kind())
	if s.ID != "" {
		msg += ": session state was lost"
	}
	res.Note(msg)
}

// ranToTheEnd reports whether an execution aiod asked to interrupt had
// run to its end first: the runtime replied ok, or it published an
// execute_result, which IPython (and the native REPLs) do once the code's
// last line has run; an interrupt landing after that stops only IPython's
// own code, which may then reply error or not at all, and print
// KeyboardInterrupt. (A session that sets ast_node_interactivity to "all"
// displays every line: there a result says less; aiod does not set it.)
// The reply may trail the idle that ended the interrupt's wait; it is
// waited for up to a second.
func (s *Session) ranToTheEnd(ex *Execution) bool {
	t := time.NewTimer(min(s.reg.cfg.CompletionGrace, time.Second))
	defer t.Stop()
	select {
	case <-ex.replied:
	case <-t.C:
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.result || ex.gotR && ex.reply.Status == "ok"
}

// finish copies the execution's outcome into res.
func (s *Session) finish(ex *Execution, res *execution.Result) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	res.Outputs = ex.col.Finish()
	res.Truncated = ex.col.Truncated()
	if res.Truncated {
		s.reg.counters.Count(OutputTruncate, "", 1)
	}
	if n := ex.col.Note(); n != "" {
		res.Note(n)
	}
	if ex.gotR {
		res.ExecutionCount = ex.reply.ExecutionCount
		res.ExitStatus = ex.reply.ExitCode
	} else if ex.result {
		res.ExecutionCount = ex.resultCount
	}
	res.NextInput = ex.nextInput
	if res.InterruptedBy == "" {
		res.InterruptedBy = ex.interruptBy
	}
	if res.Status != "" {
		return
	}
	switch {
	case ex.gotR && ex.reply.Status == "ok":
		res.Status = execution.StatusOK
	case ex.gotR && ex.reply.Status == "aborted":
		res.Status = execution.StatusError
		res.Note("execution was aborted by the runtime")
	case ex.gotR || res.FirstError() != nil:
		res.Status = execution.StatusError
	default:
		res.Status = execution.StatusOK
	}
	if res.Status != execution.StatusError {
		return
	}
	if note := s.reg.cfg.NetworkNote; note != "" && networkFailure(res) {
		res.Note(note)
	}
	if res.ErrorKind == "" {
		res.ErrorKind = execution.KindException
		if ex.interruptBy != "" {
			res.ErrorKind = execution.KindInterrupted
		}
	}
	var first string
	switch e := res.FirstError(); {
	case ex.interruptBy != "":
		first = "execution was interrupted by " + ex.interruptBy
	case e != nil:
		first = raised(e.Ename, e.Evalue)
	case ex.gotR && ex.reply.Ename != "":
		first = raised(ex.reply.Ename, ex.reply.Evalue)
	case ex.gotR && ex.reply.ExitCode != nil:
		first = fmt.Sprintf("the command exited with code %d", *ex.reply.ExitCode)
	}
	if first != "" {
		res.Notes = append([]string{first}, res.Notes...)
	}
}

// raised is the note of an execution that raised ename (evalue may be empty).
func raised(ename, evalue string) string {
	if evalue == "" {
		return "execution raised " + ename
	}
	return "execution raised " + ename + ": " + evalue
}

// Interrupt interrupts the code running in the session, if any, and records
// who asked (by, e.g. "a client (WebSocket interrupt)"): when the execution
// running now ends with an error, its result's message is "execution was
// interrupted by " + by instead of naming the exception the interrupt
// raised (KeyboardInterrupt). Code queued behind it is not touched.
func (s *Session) Interrupt(ctx context.Context, by string) error {
	_, err := s.interrupt(ctx, nil, by)
	return err
}

// InterruptExecution interrupts rec's execution if it is the one the
// session runs; ran is false when it is not (it finished, or waits).
func (s *Session) InterruptExecution(ctx context.Context, rec *execution.Record, by string) (ran bool, err error) {
	return s.interrupt(ctx, rec, by)
}

// interrupt interrupts the running code, when only is nil or the running
// execution.
func (s *Session) interrupt(ctx context.Context, only *execution.Record, by string) (bool, error) {
	s.mu.Lock()
	rt, ex := s.rt, s.cur
	if only != nil && s.running != only {
		s.mu.Unlock()
		return false, nil
	}
	s.mu.Unlock()
	return true, s.signal(ctx, rt, ex, by)
}

func (s *Session) signal(ctx context.Context, rt jupyter.Runtime, ex *Execution, by string) error {
	if rt == nil {
		return nil
	}
	if ex != nil {
		ex.interrupted(by) // before the interrupt lands, so the result sees it
	}
	err := rt.Interrupt(ctx)
	if err != nil && ex != nil {
		ex.uninterrupted(by)
	}
	if err == nil && ex != nil {
		select {
		case ex.asked <- struct{}{}:
		default:
		}
	}
	return err
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
	s.setRuntimeLocked(nil)
	s.mu.Unlock()
	if rt != nil {
		_ = rt.Close(ctx)
	}
}
