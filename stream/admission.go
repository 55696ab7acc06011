package stream

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Reasons an admission was refused, as the AdmissionRejects label and
// LimitError.Reason carry them.
const (
	RejectSessions    = "max_sessions"         // --max-sessions: too many live sessions
	RejectSessionsKey = "max_sessions_per_key" // --max-sessions-per-key: too many for one caller
	RejectQueueFull   = "start_queue_full"     // --start-queue: too many starts waiting
	RejectQueueWait   = "start_queue_timeout"  // --start-queue-timeout: a start waited too long
)

// LimitError is a call refused by an admission limit: a session cap (the
// caller has too much) or the start queue (aiod is busy; see Busy). Msg
// names the limit, its flag and the current count; RetryAfter is when
// trying again may work. How a refusal is said (an HTTP status, a
// WebSocket error, a Jupyter reason) is the surfaces' business.
type LimitError struct {
	Reason     string // one of the Reject* constants
	Msg        string
	RetryAfter time.Duration
}

func (e *LimitError) Error() string { return e.Msg }

// Busy reports whether the refusal says aiod is busy (the start queue is
// full or a start waited too long) rather than that the caller holds too
// much (a session cap).
func (e *LimitError) Busy() bool { return e.Reason == RejectQueueFull || e.Reason == RejectQueueWait }

// RetrySeconds is RetryAfter in whole seconds, at least 1, as the
// Retry-After header carries it.
func (e *LimitError) RetrySeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// Admission tunes the registry's limits; zero values turn a limit off.
type Admission struct {
	MaxSessions       int           // live sessions of all kinds (named and one-shot), pending starts included
	MaxSessionsPerKey int           // the same for one caller key ("" keys are not counted)
	MaxStarts         int           // runtime starts running at once
	StartQueue        int           // starts that may wait for a slot; past it a start is refused at once
	StartQueueWait    time.Duration // how long a start may wait for a slot
}

// gate is a fair (first come, first served) counting semaphore with a
// bounded queue, for runtime starts. It also keeps the average time a
// start holds a slot, to say when a refused caller may try again.
type gate struct {
	max, queueMax int
	wait          time.Duration

	mu     sync.Mutex
	active int
	queue  []waiter       // in arrival order
	held   map[string]int // slots held now, by party
	avg    time.Duration  // moving average of how long a slot is held
}

// waiter is a start waiting for a slot for its party (a tenant, a pool):
// ch is closed when the slot is granted.
type waiter struct {
	ch    chan struct{}
	party string
}

func newGate(a Admission) *gate {
	if a.MaxStarts <= 0 {
		return nil
	}
	return &gate{max: a.MaxStarts, queueMax: a.StartQueue, wait: a.StartQueueWait, avg: time.Second, held: map[string]int{}}
}

// StartGate is the start gate of a, to share between a Registry
// (Config.Gate) and the prewarm pools that refill under it
// (PoolConfig.Gate); nil when a sets no bound on starts.
type StartGate struct{ g *gate }

// NewStartGate makes the gate of a.
func NewStartGate(a Admission) *StartGate { return &StartGate{g: newGate(a)} }

// Acquire takes a start slot for party as a session start does; release
// gives it back. A nil gate grants at once.
func (sg *StartGate) Acquire(ctx context.Context, party string) (release func(), err error) {
	if sg == nil {
		return func() {}, nil
	}
	return sg.g.acquire(ctx, party)
}

// acquire takes a slot for party (a tenant, or a pool), waiting for at most
// the gate's wait (and while ctx lasts). A freed slot goes to the waiter
// whose party holds the fewest slots, the earliest among those: one
// tenant's burst of starts never queues another tenant's start behind it
// all. It returns the function that gives the slot back; the error is a
// *LimitError, or ctx's.
func (g *gate) acquire(ctx context.Context, party string) (release func(), err error) {
	if g == nil {
		return func() {}, nil
	}
	g.mu.Lock()
	if g.active < g.max && len(g.queue) == 0 {
		g.active++
		g.held[party]++
		g.mu.Unlock()
		return g.releaser(party), nil
	}
	if len(g.queue) >= g.queueMax {
		n := len(g.queue)
		retry := g.eta(n)
		g.mu.Unlock()
		return nil, &LimitError{Reason: RejectQueueFull, RetryAfter: retry, Msg: fmt.Sprintf(
			"%d runtime starts are already waiting, the limit (--start-queue %d; %d start at once, --max-concurrent-starts); retry after %d s",
			n, g.queueMax, g.max, secsUp(retry))}
	}
	ch := make(chan struct{})
	g.queue = append(g.queue, waiter{ch, party})
	g.mu.Unlock()

	t := time.NewTimer(g.wait)
	defer t.Stop()
	var why error
	select {
	case <-ch:
		return g.releaser(party), nil
	case <-t.C:
	case <-ctx.Done():
		why = ctx.Err()
	}
	g.mu.Lock()
	for i, w := range g.queue {
		if w.ch == ch {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			n := len(g.queue)
			retry := g.eta(n)
			g.mu.Unlock()
			if why != nil {
				return nil, why
			}
			return nil, &LimitError{Reason: RejectQueueWait, RetryAfter: retry, Msg: fmt.Sprintf(
				"the runtime start waited %s for a start slot (--start-queue-timeout; %d start at once, --max-concurrent-starts; %d more waiting); retry after %d s",
				g.wait, g.max, n, secsUp(retry))}
		}
	}
	// Granted while giving up: the slot is ours, take it.
	g.mu.Unlock()
	return g.releaser(party), nil
}

// releaser returns party's slot once, handing it to the next waiter (see
// acquire).
func (g *gate) releaser(party string) func() {
	began := time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			held := time.Since(began)
			g.mu.Lock()
			defer g.mu.Unlock()
			g.avg = (g.avg*7 + held) / 8
			if g.held[party]--; g.held[party] <= 0 {
				delete(g.held, party)
			}
			if len(g.queue) == 0 {
				g.active--
				return
			}
			next := 0
			for i, w := range g.queue {
				if g.held[w.party] < g.held[g.queue[next].party] {
					next = i
				}
			}
			w := g.queue[next]
			g.queue = append(g.queue[:next], g.queue[next+1:]...)
			g.held[w.party]++
			close(w.ch) // the slot passes on: active stays
		})
	}
}

// eta is how long n waiting starts take to get through; g.mu is held.
func (g *gate) eta(n int) time.Duration {
	return time.Duration(n+1) * g.avg / time.Duration(g.max)
}

// GateStats is what the start gate reports.
type GateStats struct {
	MaxStarts int `json:"max_concurrent_starts"`
	Starting  int `json:"starting"`
	Queued    int `json:"queued"`
	QueueMax  int `json:"start_queue"`
}

func (g *gate) stats() GateStats {
	if g == nil {
		return GateStats{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return GateStats{MaxStarts: g.max, Starting: g.active, Queued: len(g.queue), QueueMax: g.queueMax}
}

func secsUp(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }

// admit checks the session caps for one more session of owner; r.mu is
// held. A refusal is counted.
func (r *Registry) admit(owner string) error {
	a := r.cfg.Admission
	switch {
	case a.MaxSessions > 0 && r.live >= a.MaxSessions:
		retry := r.slotETA(time.Now())
		r.counters.Count(AdmissionRejects, RejectSessions, 1)
		return &LimitError{Reason: RejectSessions, RetryAfter: retry, Msg: fmt.Sprintf(
			"%d sessions are live (named and one-shot), the limit (--max-sessions %d): delete one (DELETE /v2/code/sessions/{id}) or retry after %d s",
			r.live, a.MaxSessions, secsUp(retry))}
	case a.MaxSessionsPerKey > 0 && owner != "" && r.owners[owner] >= a.MaxSessionsPerKey:
		retry := r.slotETA(time.Now())
		r.counters.Count(AdmissionRejects, RejectSessionsKey, 1)
		return &LimitError{Reason: RejectSessionsKey, RetryAfter: retry, Msg: fmt.Sprintf(
			"this caller (%s) has %d live sessions, the limit per caller (--max-sessions-per-key %d): delete one (DELETE /v2/code/sessions/{id}) or retry after %d s",
			owner, r.owners[owner], a.MaxSessionsPerKey, secsUp(retry))}
	}
	return nil
}

// AdmitProcess admits a runtime that serves one call outside any session
// (the one-shot node process of /v1/nodejs/execute with stdin), for the
// caller owner: it counts against the session caps like a one-shot
// session, and its start waits its turn at the start gate, with the same
// refusals (a *LimitError; ErrShuttingDown once Close has begun). Call
// started once the process runs, to give the start slot back, and done
// when the call has answered, to free its session slot (and the start
// slot, if started was not called). Both may be called more than once.
func (r *Registry) AdmitProcess(ctx context.Context, owner string) (started, done func(), err error) {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return nil, nil, ErrShuttingDown
	}
	if err := r.admit(owner); err != nil {
		r.mu.Unlock()
		return nil, nil, err
	}
	r.live++
	r.owners[owner]++
	r.procs++
	r.mu.Unlock()
	var once sync.Once
	free := func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.live--
			r.procs--
			if r.owners[owner]--; r.owners[owner] <= 0 {
				delete(r.owners, owner)
			}
		})
	}
	gctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	release, err := r.gate.acquire(gctx, owner)
	if err != nil {
		free()
		if le, ok := err.(*LimitError); ok {
			r.counters.Count(AdmissionRejects, le.Reason, 1)
			return nil, nil, le
		}
		return nil, nil, &StartError{Err: err}
	}
	return release, func() { release(); free() }, nil
}

// count and uncount keep the session caps' tally of s; r.mu is held.
// uncount is idempotent.
func (r *Registry) count(s *Session, owner string) {
	s.owner, s.counted = owner, true
	r.live++
	r.owners[owner]++
}

func (r *Registry) uncount(s *Session) {
	if !s.counted {
		return
	}
	s.counted = false
	r.live--
	if r.owners[s.owner]--; r.owners[s.owner] <= 0 {
		delete(r.owners, s.owner)
	}
}

// slotETA guesses when a session slot frees: a one-shot call in flight
// ends soon; otherwise the first idle session is reclaimed. Between 1 s and
// a minute; r.mu is held.
func (r *Registry) slotETA(now time.Time) time.Duration {
	const soon, most = 2 * time.Second, time.Minute
	eta := most
	if len(r.temps) > 0 || r.procs > 0 {
		eta = soon
	}
	for _, s := range r.sessions {
		if d, ok := s.reclaimIn(now); ok && d < eta {
			eta = d
		}
	}
	return min(max(eta, time.Second), most)
}

// AdmissionStats is what the caps and the start gate count now.
type AdmissionStats struct {
	Live  int       // sessions counted against the caps
	Gate  GateStats // the start gate (zero when unbounded)
	Limit Admission // the configured limits
}

// AdmissionStats reports the sessions the caps count now, and the start
// gate.
func (r *Registry) AdmissionStats() AdmissionStats {
	r.mu.Lock()
	live := r.live
	r.mu.Unlock()
	return AdmissionStats{Live: live, Gate: r.gate.stats(), Limit: r.cfg.Admission}
}
