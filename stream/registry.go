package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
)

const releaseDelay = 100 * time.Millisecond

// ErrShuttingDown is returned when a session is asked for during shutdown.
var ErrShuttingDown = errors.New("aiod is shutting down")

// Config tunes a Registry. Zero values take the defaults named below.
type Config struct {
	Budget          int              // output budget per execution; DefaultBudget
	InterruptGrace  time.Duration    // how long a timed-out call waits for the interrupt; 2 s
	CompletionGrace time.Duration    // how long to wait for idle after the reply (or back), after the last message; 5 s
	ReapInterval    time.Duration    // how often idle sessions are looked for; 5 s
	CloseTimeout    time.Duration    // bound on closing one runtime; 10 s
	Counters        *Counters        // where sessions count; a set of its own when nil
	Executions      execution.Config // what finished executions keep (LogBytes defaults to Budget)
	Store           *execution.Store // the store to use (OpenStore's, written through to disk); nil makes one from Executions
	Snapshots       Snapshots        // saves named sessions before idle reclaim and shutdown, restores them on their next start; nil: none
	Admission       Admission        // session caps and the start queue; zero values turn them off
	Gate            *StartGate       // the start gate, shared with the pools; nil: made from Admission
	// NetworkNote is added to the message of a call that failed on a
	// network error (networkFailure), where runtimes have no network or
	// only some of it: the setting that decides it. "" adds nothing.
	NetworkNote string
	// Ran is called after code ran in a named session (its result is
	// in): the session's state may have changed. nil: nothing is called.
	Ran    func(*Session)
	Logger *slog.Logger
}

// sessionKey names a named session: its tenant's, in one language.
type sessionKey struct{ tenant, lang, id string }

// Registry owns every session, named and temporary: it creates named ones
// on first use, reclaims idle ones, closes temporary runtimes after one-shot
// calls, and on Close shuts everything down and waits for it.
//
// Every name belongs to a tenant (the caller, see guard.Caller.Tenant):
// sessions are keyed by (tenant, language, id), and every method that finds
// sessions by name takes the tenant, so that one tenant's names are unknown
// to another. Kernel ids are unique across tenants, but Kernel finds only
// the asking tenant's.
type Registry struct {
	cfg      Config
	counters *Counters
	execs    *execution.Store
	ctx      context.Context // parent of runtime starts and interrupts; ends at Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup // background closes and the reaper

	mu       sync.Mutex
	sessions map[sessionKey]*Session
	kernels  map[string]*Session   // by KernelID, every tenant's (ids are unique)
	temps    map[*Session]struct{} // temporary sessions not released yet
	ended    *endedLog             // recently ended named sessions, for the next call's message
	live     int                   // sessions counted against the caps: named ones, temporary ones not released, and admitted processes
	owners   map[string]int        // live sessions by caller key
	procs    int                   // processes admitted by AdmitProcess and not done
	closing  bool                  // Close has begun: no more sessions, and no more r.wg.Add (Close's Wait may be running)

	trim chan struct{} // pokes the memory trimmer; never closed
	gate *gate         // bounds concurrent runtime starts; nil: unbounded
}

// NewRegistry returns a registry and starts its reaper; call Close.
func NewRegistry(cfg Config) *Registry {
	if cfg.Budget <= 0 {
		cfg.Budget = execution.DefaultBudget
	}
	if cfg.InterruptGrace <= 0 {
		cfg.InterruptGrace = 2 * time.Second
	}
	if cfg.CompletionGrace <= 0 {
		cfg.CompletionGrace = 5 * time.Second
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = 5 * time.Second
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = 10 * time.Second
	}
	if cfg.Counters == nil {
		cfg.Counters = NewCounters()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Executions.LogBytes <= 0 {
		cfg.Executions.LogBytes = execution.LogBytesOf(cfg.Budget)
	}
	execs := cfg.Store
	if execs == nil {
		execs = execution.NewStore(cfg.Executions)
	}
	r := &Registry{cfg: cfg, counters: cfg.Counters, execs: execs, sessions: map[sessionKey]*Session{},
		kernels: map[string]*Session{}, temps: map[*Session]struct{}{}, trim: make(chan struct{}, 1),
		ended: newEndedLog(endedMax, endedTTL), owners: map[string]int{}, gate: newGate(cfg.Admission)}
	if cfg.Gate != nil {
		r.gate = cfg.Gate.g
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Add(2)
	go r.reap()
	go r.trimmer()
	return r
}

// Counters is where the registry's sessions and their muxes count.
func (r *Registry) Counters() *Counters { return r.counters }

// Executions is the store of every execution the registry's sessions run.
func (r *Registry) Executions() *execution.Store { return r.execs }

func (r *Registry) newSession(tenant, id string, b Backend) *Session {
	mux := NewMux(r.counters)
	mux.onLarge = r.pokeTrim
	mux.outBytes = r.counters.Cell(OutputBytes, b.Language)
	now := time.Now()
	return &Session{
		ID: id, Tenant: tenant, Language: b.Language, Backend: b, Created: now,
		reg: r, mux: mux, folderTurn: make(chan struct{}, 1), closed: make(chan struct{}),
		last: now, idle: b.Idle, cwd: b.Cwd,
	}
}

// started counts a runtime start of s (mode: cold or pool) and, when it
// worked, observes how long it took.
func (r *Registry) started(s *Session, mode string, took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "failed"
	}
	r.counters.Count(RuntimeStarts, Labels(s.Language, s.Backend.Name, mode, result), 1)
	if err == nil {
		r.counters.Observe(StartSeconds, Labels(s.Language, s.Backend.Name, mode), took.Seconds())
	}
}

// executed counts an execution of s that produced a result and observes
// how long it ran (took < 0: it never ran, e.g. it timed out in the queue).
func (r *Registry) executed(s *Session, res *execution.Result, took time.Duration) {
	r.counters.Count(ExecutionsRun, Labels(s.Language, s.Backend.Name, res.Status), 1)
	if took >= 0 {
		r.counters.Observe(ExecutionSeconds, Labels(s.Language, s.Backend.Name), took.Seconds())
		if r.cfg.Ran != nil && s.ID != "" {
			r.cfg.Ran(s)
		}
	}
}

func (r *Registry) pokeTrim() {
	select {
	case r.trim <- struct{}{}:
	default:
	}
}

// trimmer hands memory back to the OS shortly after a huge kernel message
// was folded, at most once a second. Without it a 100 MB message leaves the
// heap goal (and the daemon's RSS) doubled until the next natural GC.
func (r *Registry) trimmer() {
	defer r.wg.Done()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.trim:
		}
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(20 * time.Millisecond): // let the reader drop the message
		}
		debug.FreeOSMemory()
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// Open returns tenant's session (lang, id), creating it with backend b
// when it does not exist. created is true when it was made by this call.
func (r *Registry) Open(tenant, lang, id string, b Backend) (s *Session, created bool, err error) {
	return r.OpenFor("", tenant, lang, id, b)
}

// OpenFor is Open for the caller owner (a caller key; "" for none): a
// session it creates counts against the session caps, and the error is a
// *LimitError when a cap is reached. Using a session of tenant that exists
// is never refused.
func (r *Registry) OpenFor(owner, tenant, lang, id string, b Backend) (s *Session, created bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return nil, false, ErrShuttingDown
	}
	k := sessionKey{tenant, lang, id}
	if s := r.sessions[k]; s != nil {
		return s, false, nil
	}
	if err := r.admit(owner); err != nil {
		return nil, false, err
	}
	s = r.newSession(tenant, id, b)
	r.count(s, owner)
	s.KernelID = strings.ToLower(id)
	if !uuidRE.MatchString(id) || r.kernels[s.KernelID] != nil {
		s.KernelID = jupyter.NewID()
	}
	if why, ago, ok := r.ended.take(k, time.Now()); ok {
		// The id was used a moment ago: its first call says that this
		// runtime is fresh, and why (ended.go).
		s.lost = fmt.Sprintf("%s, %s ago", why, secs(ago))
	}
	r.sessions[k] = s
	r.kernels[s.KernelID] = s
	r.cfg.Logger.Info("session created", "session", id, "tenant", tenant, "language", lang, "backend", b.Name)
	return s, true, nil
}

// Get returns tenant's session (lang, id), or nil.
func (r *Registry) Get(tenant, lang, id string) *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[sessionKey{tenant, lang, id}]
}

// Kernel returns tenant's session whose KernelID is id (any case), or nil:
// another tenant's kernel is unknown.
func (r *Registry) Kernel(tenant, id string) *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.kernels[strings.ToLower(id)]; s != nil && s.Tenant == tenant {
		return s
	}
	return nil
}

// List returns tenant's named sessions, sorted by id then language.
func (r *Registry) List(tenant string) []*Session {
	return r.list(func(s *Session) bool { return s.Tenant == tenant })
}

// ListAll returns the named sessions of every tenant, sorted by id, then
// language, then tenant: for totals (metrics), never for an answer to a
// caller.
func (r *Registry) ListAll() []*Session {
	return r.list(func(*Session) bool { return true })
}

func (r *Registry) list(match func(*Session) bool) []*Session {
	r.mu.Lock()
	out := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		if match(s) {
			out = append(out, s)
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		if a.Language != b.Language {
			return a.Language < b.Language
		}
		return a.Tenant < b.Tenant
	})
	return out
}

// Delete ends every session of tenant named id, of any language, and
// returns how many there were. Runtimes are closed before it returns.
func (r *Registry) Delete(ctx context.Context, tenant, id string) int {
	n := r.remove(ctx, func(s *Session) bool { return s.Tenant == tenant && s.ID == id }, ClosedDeleted)
	if sn := r.cfg.Snapshots; sn != nil {
		// Its saved state goes too: the id comes back empty.
		if f := sn.Forget(tenant, "", id); n == 0 {
			n = f
		}
	}
	return n
}

// DeleteOne ends tenant's one session (lang, id) and reports whether it
// existed.
func (r *Registry) DeleteOne(ctx context.Context, tenant, lang, id string) bool {
	n := r.remove(ctx, func(s *Session) bool {
		return s.Tenant == tenant && s.Language == lang && s.ID == id
	}, ClosedDeleted)
	if sn := r.cfg.Snapshots; sn != nil {
		n += sn.Forget(tenant, lang, id)
	}
	return n > 0
}

// DeleteSession ends one session (not the others sharing its id in other
// languages) and reports whether it was registered.
func (r *Registry) DeleteSession(ctx context.Context, s *Session) bool {
	n := r.remove(ctx, func(x *Session) bool { return x == s }, ClosedDeleted)
	if sn := r.cfg.Snapshots; sn != nil && n > 0 && s.ID != "" {
		sn.Forget(s.Tenant, s.Language, s.ID)
	}
	return n > 0
}

func (r *Registry) remove(ctx context.Context, match func(*Session) bool, why string) int {
	now := time.Now()
	r.mu.Lock()
	var gone []*Session
	var reasons []string
	for k, s := range r.sessions {
		if match(s) {
			gone = append(gone, s)
			delete(r.sessions, k)
			delete(r.kernels, s.KernelID)
			r.uncount(s)
			reason := s.endReason(why, now)
			if reason != "" {
				r.ended.add(k, reason, now)
			}
			reasons = append(reasons, reason)
		}
	}
	held := r.reserveSaves(gone, why) // before anyone can open the name again
	r.mu.Unlock()
	defer held()
	r.closeAll(ctx, gone, why, reasons)
	return len(gone)
}

// closeAll closes sessions in parallel and waits for them; reasons, when
// given, says in words why each one ends (for the log).
func (r *Registry) closeAll(ctx context.Context, ss []*Session, why string, reasons []string) {
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.saveBeforeClose(ctx, s, why)
			s.Close(ctx, why)
			if s.ID != "" {
				reason := why
				if i < len(reasons) && reasons[i] != "" {
					reason = reasons[i]
				}
				r.cfg.Logger.Info("session closed", "session", s.ID, "language", s.Language, "why", why, "reason", reason)
			}
		}()
	}
	wg.Wait()
}

// Temp returns a temporary session of tenant for one call, registered so
// that Close ends it; pass it to Release after the call. It fails with
// ErrShuttingDown once Close has begun.
func (r *Registry) Temp(tenant string, b Backend) (*Session, error) { return r.TempFor("", tenant, b) }

// TempFor is Temp for the caller owner: the session counts against the
// session caps until it is released, and the error is a *LimitError when a
// cap is reached.
func (r *Registry) TempFor(owner, tenant string, b Backend) (*Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return nil, ErrShuttingDown
	}
	if err := r.admit(owner); err != nil {
		return nil, err
	}
	s := r.newSession(tenant, "", b)
	r.count(s, owner)
	r.temps[s] = struct{}{}
	return s, nil
}

// Release closes a temporary session's runtime in the background, so that
// the caller's answer does not wait for the process to exit. The close
// starts a moment later (releaseDelay): a process exiting costs CPU, and on
// a small machine it would otherwise compete with writing the answer.
func (r *Registry) Release(s *Session) {
	r.mu.Lock()
	r.uncount(s) // the slot is free at once; the process exits behind
	r.mu.Unlock()
	r.background(func() {
		select {
		case <-time.After(releaseDelay):
		case <-r.ctx.Done():
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.CloseTimeout)
		defer cancel()
		s.Close(ctx, ClosedReleased)
		r.mu.Lock()
		delete(r.temps, s)
		r.mu.Unlock()
	})
}

// closeRuntime closes a runtime in the background.
func (r *Registry) closeRuntime(rt jupyter.Runtime) {
	r.background(func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.CloseTimeout)
		defer cancel()
		_ = rt.Close(ctx)
	})
}

// goUnlessClosed runs f on a goroutine that Close waits for, unless Close
// has begun (then f is not run at all).
//
// Every r.wg.Add is made under r.mu while closing is false, so that it
// happens before Close's r.wg.Wait: an Add while Wait may be running (the
// count at zero) is a misuse of the WaitGroup.
func (r *Registry) goUnlessClosed(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
}

// afterDoneUnlessClosed runs f once rt is done, as goUnlessClosed would
// after waiting for it (Close waits for f), but without a goroutine parked
// meanwhile when rt, or the runtime it wraps, calls back
// (jupyter.DoneNotifier): a wrapper's Done is the runtime's it wraps.
func (r *Registry) afterDoneUnlessClosed(rt jupyter.Runtime, f func()) {
	n, ok := jupyter.Find[jupyter.DoneNotifier](rt)
	if !ok {
		r.goUnlessClosed(func() { <-rt.Done(); f() })
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return
	}
	r.wg.Add(1)
	n.AfterDone(func() {
		defer r.wg.Done()
		f()
	})
}

// background runs f on a goroutine that Close waits for; once Close has
// begun, f runs on the caller's goroutine instead (see goUnlessClosed).
func (r *Registry) background(f func()) {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		f()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		f()
	}()
}

func (r *Registry) reap() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
			r.ReapIdle(time.Now())
			r.execs.Sweep(time.Now())
		}
	}
}

// ReapIdle closes sessions unused for longer than their backend's idle time
// as of now (none with a call running or queued, or a front end attached),
// and returns how many it closed.
func (r *Registry) ReapIdle(now time.Time) int {
	var langs []string
	n := r.remove(r.ctx, func(s *Session) bool {
		if s.reapable(now) {
			langs = append(langs, s.Language)
			return true
		}
		return false
	}, ClosedIdle)
	for _, l := range langs {
		r.counters.Count(IdleReclaims, l, 1)
	}
	return n
}

// runtimeCost is what aiod itself holds per live runtime (its sockets'
// buffers, goroutines, mux): measured at about 140 KiB per kernel.
const runtimeCost = 160 << 10

// HeldBytes is the memory aiod deliberately holds for its sessions and
// executions: what the execution store retains (finished answers, the logs
// of running executions), the outputs running executions have collected,
// and a fixed cost per live runtime. The daemon raises its soft memory
// limit by it, so that a full store or a thousand sessions do not make the
// garbage collector spin. buffers is the part of it that is bytes (text,
// encoded records and messages), which the collector marks without
// scanning: the daemon does not let its heap double for those.
func (r *Registry) HeldBytes() (held, buffers int64) {
	// Read four times a second: a thousand idle sessions cost a look at
	// two atomics each, and only the muxes running something are locked.
	var busy []*Mux
	r.mu.Lock()
	n := int64(len(r.temps))
	for s := range r.temps {
		if s.mux.busy.Load() > 0 {
			busy = append(busy, s.mux)
		}
	}
	for _, s := range r.sessions {
		if s.hasRT.Load() {
			n++
		}
		if s.mux.busy.Load() > 0 {
			busy = append(busy, s.mux)
		}
	}
	r.mu.Unlock()
	for _, m := range busy {
		buffers += m.Held()
	}
	buffers += r.execs.HeldBytes()
	return buffers + n*runtimeCost, buffers
}

// Len is the number of named sessions.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// Close ends every session, named and temporary (calls in flight answer
// that aiod shut down), and waits for all runtimes and background work,
// bounded by ctx. Calling it twice is harmless.
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closing = true
	temps := make([]*Session, 0, len(r.temps))
	for s := range r.temps {
		temps = append(temps, s)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.closeAll(ctx, temps, ClosedShutdown, nil)
	}()
	r.remove(ctx, func(*Session) bool { return true }, ClosedShutdown)
	wg.Wait()
	r.cancel()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
