package execution

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Execution states, as GET /v2/code/executions/{id} reports them.
const (
	StateQueued  = "queued"
	StateRunning = "running"
	StateDone    = "done"
)

// Defaults of Config.
const (
	DefaultRetention      = 10 * time.Minute
	DefaultRetentionBytes = 256 << 20
	maxTombstones         = 10000
	// entryOverhead is what an entry costs beyond its message's bytes: the
	// message, header, decoded output and entry structs and their strings.
	entryOverhead = 512
)

// Errors of the execution store.
var (
	// ErrExecutionConflict is returned when an execution id is reused
	// with other code, language or session.
	ErrExecutionConflict = errors.New("execution id already used for other code, language or session")
	// ErrNoExecution is returned for an execution id never seen (or
	// forgotten long ago).
	ErrNoExecution = errors.New("no such execution")
)

// GoneError says that what was asked for is no longer held: the execution
// was evicted (At, Why), or the outputs before FirstSeq were dropped from
// its log to keep it within its bound.
type GoneError struct {
	ID       string
	At       time.Time // when it was evicted; zero for a cut log
	Why      string
	FirstSeq int // the first output seq still held, for a cut log
}

func (e *GoneError) Error() string {
	if e.At.IsZero() {
		return fmt.Sprintf("execution %s: outputs before seq %d are no longer held (%s); resume from %d", e.ID, e.FirstSeq, e.Why, e.FirstSeq-1)
	}
	return fmt.Sprintf("execution %s was evicted at %s: %s", e.ID, e.At.UTC().Format(time.RFC3339), e.Why)
}

// LogBytesOf is the log an execution keeps for an output budget: half of
// it. The other half is its answer's head (stream text counts twice
// against the budget), so that a running execution holds about one
// budget of output, however much it prints.
func LogBytesOf(budget int) int {
	if budget <= 0 {
		budget = DefaultBudget
	}
	return max(budget/2, 1)
}

// Config bounds what finished executions keep.
type Config struct {
	Retention      time.Duration // how long a finished execution is kept; DefaultRetention
	RetentionBytes int           // bytes all finished executions may hold; DefaultRetentionBytes
	LogBytes       int           // bytes of outputs one execution's log holds (oldest dropped past it); LogBytesOf the output budget
	// Path, when set, is a bbolt file the store writes through to
	// (OpenStore): retention and its bytes then apply on disk, and memory
	// keeps running executions and CacheBytes of finished ones.
	Path       string
	CacheBytes int // finished executions kept in memory with Path; DefaultCacheBytes
	// OnError, when set, hears of each write to Path that failed (a full
	// disk): what failed is kept queued and written again at the next
	// flush, and memory still holds RetentionBytes at most meanwhile.
	OnError func(error)
	// Shared, when set, is a store that other replicas of a cluster reach:
	// each finished execution is handed to it, and an id this store does
	// not know is looked for there before it is called unknown.
	Shared Shared
}

// Shared is a store of finished executions beyond this process (the
// cluster's, gateway/cluster). Records travel in the store file's encoding.
type Shared interface {
	// Put keeps a finished execution's record, which rec encodes when
	// called (off the caller's path: it marshals the whole result); Put
	// must not block (a bounded queue that drops, say).
	Put(tenant, id string, rec func() ([]byte, error))
	// Get returns the record kept for tenant's id, if any, within a
	// bound of its own.
	Get(tenant, id string) ([]byte, bool)
}

// Store records every execution that runs through a Session: its
// state, its outputs in order (each with a seq that never restarts), and
// its result, so that a caller can fetch it by id, wait for it, resume its
// stream after a lost connection, or retry without running it twice. A
// finished execution is kept for Retention, within RetentionBytes in all
// (oldest evicted first); an evicted one leaves a tombstone (bounded) so
// that its id answers "gone" rather than "unknown".
//
// Execution ids belong to a tenant (guard.Caller.Tenant), as session ids
// do: two tenants may use the same id for two executions, and one tenant's
// ids, held or evicted, are unknown to another.
type Store struct {
	cfg Config

	mu        sync.Mutex
	byID      map[execKey]*Record
	finished  []*Record // in the order they finished: eviction order
	bytes     int       // held by finished records
	tombs     map[execKey]*GoneError
	tombOrder []execKey
	peak      int // the most records byID held since it was last made anew
	// out holds the records that left memory for the file while readers
	// still pulled them (Track): they keep their result and what those
	// readers have not had, which HeldBytes counts until the last goes.
	out map[*Record]struct{}

	whyAge, whyBytes string // why an execution was evicted, one string for all tombstones

	disk   *disk        // the write-through to Config.Path, or nil
	errors atomic.Int64 // writes to it that failed
	// runningLog sums the logs of the records still running, kept as
	// they change: HeldBytes is read four times a second, and walking
	// thousands of records for it cost the idle daemon CPU.
	runningLog atomic.Int64
}

// shrinkFrom is the size from which byID is made anew once it holds an
// eighth of its peak: a Go map keeps its buckets after deletes, so a burst
// of executions would hold their room for ever.
const shrinkFrom = 4096

// execKey names an execution: its tenant's id.
type execKey struct{ tenant, id string }

// NewStore returns an empty store.
func NewStore(cfg Config) *Store {
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.RetentionBytes <= 0 {
		cfg.RetentionBytes = DefaultRetentionBytes
	}
	if cfg.LogBytes <= 0 {
		cfg.LogBytes = LogBytesOf(DefaultBudget)
	}
	return &Store{cfg: cfg, byID: map[execKey]*Record{}, tombs: map[execKey]*GoneError{}, out: map[*Record]struct{}{},
		whyAge: fmt.Sprintf("finished more than %s ago (--execution-retention)", cfg.Retention),
		whyBytes: fmt.Sprintf("finished executions held more than %d bytes (--execution-retention-bytes); the oldest go first",
			cfg.RetentionBytes)}
}

// Key is what must match for a retry to attach to an execution: the same
// code, language and session ("" for one-shot).
type Key struct{ Language, SessionID, Code string }

// Claim returns tenant's execution id (a new one when id is ""). created
// is true when this call made it and must run it; otherwise rec is the
// execution the id names, queued, running or done, and the call must not
// run it again. A known id with another key is ErrExecutionConflict; an
// evicted one is a *GoneError. Only tenant's own ids are looked at.
func (x *Store) Claim(tenant, id string, k Key) (rec *Record, created bool, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.sweepLocked(time.Now())
	if id == "" {
		// An id of our own is new: no lookup, in memory or on disk (where
		// one costs a read transaction under x.mu). In time order, so
		// the store's id index grows at its end.
		id = jupyter.NewTimeID()
	} else if r, err := x.existingLocked(execKey{tenant, id}, k); r != nil || err != nil {
		return r, false, err
	}
	ek := execKey{tenant, id}
	r := &Record{ID: id, Tenant: tenant, key: k, Created: time.Now(), x: x, state: StateQueued,
		done: make(chan struct{}), cancel: make(chan struct{}), sinks: map[*follower]struct{}{}, firstSeq: 1}
	x.byID[ek] = r
	x.peak = max(x.peak, len(x.byID))
	if x.disk != nil {
		x.disk.enqueue(diskOp{rec: r, pending: true})
	}
	return r, true, nil
}

// existingLocked is the execution ek names already, in memory or on
// disk; ErrExecutionConflict when it ran other code than k, a *GoneError
// when it was evicted; nil, nil when there is none. x.mu is held.
func (x *Store) existingLocked(ek execKey, k Key) (*Record, error) {
	r := x.byID[ek]
	if r == nil && x.tombs[ek] != nil {
		return nil, x.tombs[ek]
	}
	if r == nil && x.disk != nil {
		r = x.load(ek)
	}
	if r != nil && r.key != k {
		return nil, ErrExecutionConflict
	}
	return r, nil
}

// Get returns tenant's execution id names: ErrNoExecution when unknown
// (another tenant's ids included), a *GoneError when evicted.
func (x *Store) Get(tenant, id string) (*Record, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.sweepLocked(time.Now())
	ek := execKey{tenant, id}
	if r := x.byID[ek]; r != nil {
		return r, nil
	}
	if g := x.tombs[ek]; g != nil {
		return nil, g
	}
	if x.disk != nil {
		if r := x.load(ek); r != nil {
			return r, nil
		}
	}
	if sh := x.cfg.Shared; sh != nil {
		// Another replica ran it (this tenant's home before this one).
		x.mu.Unlock()
		v, ok := sh.Get(tenant, id)
		x.mu.Lock()
		if ok {
			if r, err := x.decodeRec(v); err == nil && r.Tenant == tenant && r.ID == id {
				return r, nil
			}
		}
	}
	return nil, ErrNoExecution
}

// Stats is what the store holds.
type Stats struct {
	Held, Finished int
	Bytes          int // held by finished executions
	Evicted        int // tombstones kept
}

// HeldBytes is what the finished executions hold (those in memory, and
// those that left it while streams still pull them), and the logs of the
// running ones.
func (x *Store) HeldBytes() int64 {
	x.mu.Lock()
	n := x.bytes + int(x.runningLog.Load())
	out := make([]*Record, 0, len(x.out))
	for r := range x.out {
		out = append(out, r)
	}
	x.mu.Unlock()
	for _, r := range out {
		n += r.heldBytes()
	}
	return int64(n)
}

// Config is the store's bounds.
func (x *Store) Config() Config { return x.cfg }

// Stats reports the store's size.
func (x *Store) Stats() Stats {
	x.mu.Lock()
	defer x.mu.Unlock()
	return Stats{Held: len(x.byID), Finished: len(x.finished), Bytes: x.bytes, Evicted: len(x.tombs)}
}

// Sweep evicts the finished executions older than the retention.
func (x *Store) Sweep(now time.Time) {
	x.mu.Lock()
	x.sweepLocked(now)
	x.mu.Unlock()
}

func (x *Store) sweepLocked(now time.Time) {
	defer x.compactLocked()
	for len(x.finished) > 0 {
		r := x.finished[0]
		switch {
		case x.disk != nil && now.Sub(r.endedAt()) <= x.cfg.Retention && x.bytes > x.cfg.CacheBytes && r.persisted.Load():
			// On disk: it leaves the cache, not the store.
			x.finished[0] = nil
			x.finished = x.finished[1:]
			x.bytes -= r.heldBytes()
			delete(x.byID, execKey{r.Tenant, r.ID})
			if r.leaveMemory() {
				x.out[r] = struct{}{}
			}
		case x.disk != nil && now.Sub(r.endedAt()) <= x.cfg.Retention && x.bytes > x.cfg.RetentionBytes:
			// Not written yet (the disk fails): memory holds the
			// retention's bytes at most, as it does without a disk.
			x.evictLocked(r, x.whyBytes)
		case x.disk != nil && now.Sub(r.endedAt()) <= x.cfg.Retention:
			return // the disk's retention applies to the bytes
		case now.Sub(r.endedAt()) > x.cfg.Retention:
			x.evictLocked(r, x.whyAge)
		case x.bytes > x.cfg.RetentionBytes:
			x.evictLocked(r, x.whyBytes)
		default:
			return
		}
	}
}

// evictLocked forgets r. The slots it leaves at the front of finished and
// tombOrder are cleared: a slice's backing array keeps whatever its
// dropped front still points at alive.
func (x *Store) evictLocked(r *Record, why string) {
	x.finished[0] = nil
	x.finished = x.finished[1:]
	x.bytes -= r.heldBytes()
	ek := execKey{r.Tenant, r.ID}
	delete(x.byID, ek)
	x.tombLocked(ek, why)
	r.evicted.Store(true)
	r.release()
}

// tombLocked leaves a tombstone for an evicted execution (bounded).
func (x *Store) tombLocked(ek execKey, why string) {
	if x.tombs[ek] == nil {
		x.tombOrder = append(x.tombOrder, ek)
	}
	x.tombs[ek] = &GoneError{ID: ek.id, At: time.Now(), Why: why}
	if len(x.tombOrder) > maxTombstones {
		delete(x.tombs, x.tombOrder[0])
		x.tombOrder[0] = execKey{}
		x.tombOrder = x.tombOrder[1:]
	}
}

// dropFinishedLocked takes r out of the finished list (the cache), if it
// is there.
func (x *Store) dropFinishedLocked(r *Record) {
	for i, f := range x.finished {
		if f == r {
			x.finished = append(x.finished[:i:i], x.finished[i+1:]...)
			x.bytes -= r.heldBytes()
			return
		}
	}
}

// compactLocked gives back the room a burst left: byID is made anew once
// it holds an eighth of its peak, and finished is copied out of a backing
// array with room for four times its length (or more) left.
func (x *Store) compactLocked() {
	if x.peak >= shrinkFrom && len(x.byID) < x.peak/8 {
		m := make(map[execKey]*Record, len(x.byID))
		maps.Copy(m, x.byID)
		x.byID, x.peak = m, len(m)
	}
	if c := cap(x.finished); c >= 64 && len(x.finished) < c/4 {
		x.finished = append([]*Record(nil), x.finished...)
	}
}

// finished records r as done and evicts what the bounds require.
func (x *Store) finish(r *Record) {
	x.mu.Lock()
	x.finished = append(x.finished, r)
	x.bytes += r.heldBytes()
	if x.disk != nil {
		x.disk.enqueue(diskOp{rec: r})
	}
	x.sweepLocked(time.Now())
	x.mu.Unlock()
	if sh := x.cfg.Shared; sh != nil {
		sh.Put(r.Tenant, r.ID, func() ([]byte, error) { return encodeRec(r, false) }) // JSON only: readable by replicas of other versions
	}
}

// Entry is one thing an execution sent, in order: an output (Seq > 0, the
// same seq on every path), a status, or the result.
type Entry struct {
	Seq   int // outputs: 1, 2, ...; status and result: the seq of the last output before them
	Event Event
	Err   error // the execution could not run (with Event.Result nil)
}

// Record is one execution of the store.
type Record struct {
	ID      string
	Tenant  string // whose id it is
	Created time.Time
	key     Key
	x       *Store

	done   chan struct{} // closed when the result (or the failure to run) is in
	cancel chan struct{} // closed to drop the execution while it is queued
	once   sync.Once     // closes cancel

	mu        sync.Mutex
	state     string
	started   time.Time
	ended     time.Time
	queued    time.Duration
	entries   []Entry // outputs (oldest dropped past LogBytes) and the last status
	firstSeq  int     // seq of the oldest output still held
	lastSeq   int
	logBytes  int
	status    string // last execution_state
	result    *Result
	runErr    error  // why it could not run at all
	dropper   string // who dropped it while queued
	runner    Runner // the session it runs in (temporary ones included), once it entered one
	sinks     map[*follower]struct{}
	resultLen int
	persisted atomic.Bool             // written to the store's file (finished)
	evicted   atomic.Bool             // forgotten: a write still queued skips it
	claimed   atomic.Bool             // its claim was written to the store's run bucket
	loaded    bool                    // read back from the store's file: its result, no log
	statuses  []Entry                 // the last maxStatuses status entries, in order (Pull)
	statusN   int                     // status entries ever recorded: statuses[0] is number statusN-len(statuses)
	dropped   [2]int                  // bytes of stdout and stderr text dropped from the log (StreamFrom)
	readers   map[*readerPos]struct{} // pulling readers (Track) and the last output each had
	logLeft   bool                    // its log was let go as it left the store's memory: its result, no log
}

// Runner is what runs an execution: the session it entered (package
// stream's Session).
type Runner interface {
	// InterruptExecution interrupts rec when it is the one running, and
	// reports whether it was.
	InterruptExecution(ctx context.Context, rec *Record, by string) (ran bool, err error)
}

// Runner is the session the execution entered (a temporary one for a
// one-shot call), or nil before it entered one and once it is done.
func (r *Record) Runner() Runner {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runner
}

// Enter notes the session the execution entered.
func (r *Record) Enter(s Runner) {
	r.mu.Lock()
	r.runner = s
	r.mu.Unlock()
}

// Key is what the execution was claimed with.
func (r *Record) Key() Key { return r.key }

// Done is closed when the execution has finished (or could not run).
func (r *Record) Done() <-chan struct{} { return r.done }

// View is a snapshot of an execution for listings and GET.
type View struct {
	ID, State, SessionID, Language string
	Created, Started, Ended        time.Time
	Queued                         time.Duration
	LastSeq                        int
	Result                         *Result
	Err                            error // why it could not run at all, or nil
}

// View returns a snapshot.
func (r *Record) View() View {
	r.mu.Lock()
	defer r.mu.Unlock()
	return View{ID: r.ID, State: r.state, SessionID: r.key.SessionID, Language: r.key.Language,
		Created: r.Created, Started: r.started, Ended: r.ended, Queued: r.queued, LastSeq: r.lastSeq,
		Result: r.result, Err: r.runErr}
}

// Outputs is the outputs the record holds, in order: all of them, or
// the last LogBytes of them when earlier ones were dropped.
func (r *Record) Outputs() []*Output {
	r.mu.Lock()
	defer r.mu.Unlock()
	outs := make([]*Output, 0, len(r.entries))
	for _, e := range r.entries {
		if e.Event.Out != nil {
			outs = append(outs, e.Event.Out)
		}
	}
	return outs
}

// Wait blocks until the execution is done or ctx ends; it returns the
// result, or why the execution could not run (what Fail was given), or
// ctx's error.
func (r *Record) Wait(ctx context.Context) (*Result, error, error) {
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result, r.runErr, nil
}

// Fail records that the execution could not run at all, and why: the
// error is kept as it is, for whoever started the execution to say in its
// protocol (the store does not read it).
func (r *Record) Fail(e error) {
	r.mu.Lock()
	if r.state == StateDone {
		r.mu.Unlock()
		return
	}
	r.endLogLocked()
	r.state, r.ended, r.runErr, r.runner = StateDone, time.Now(), e, nil
	r.emitLocked(Entry{Seq: r.lastSeq, Err: e})
	r.closeSinksLocked()
	r.mu.Unlock()
	close(r.done)
	r.x.finish(r)
}

// Cancelled is closed when Drop took the execution out of its queue.
func (r *Record) Cancelled() <-chan struct{} { return r.cancel }

// Drop cancels the execution while it is still queued (by says who did);
// it reports whether it was queued.
func (r *Record) Drop(by string) bool {
	r.mu.Lock()
	queued := r.state == StateQueued
	if queued {
		r.dropper = by
	}
	r.mu.Unlock()
	if queued {
		r.once.Do(func() { close(r.cancel) })
	}
	return queued
}

// DroppedBy says who dropped the execution while it was queued (Drop).
func (r *Record) DroppedBy() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropper
}

// Started marks the execution as running after waiting queued.
func (r *Record) Started(queued time.Duration) {
	r.mu.Lock()
	r.state, r.started, r.queued = StateRunning, time.Now(), queued
	r.mu.Unlock()
}

// Deliver is the record's subscription to its execution: outputs and
// statuses go to its log and its followers, the result ends it.
func (r *Record) Deliver(ev Event) {
	switch {
	case ev.Result != nil:
		r.complete(ev)
	case ev.Out != nil || ev.State != "":
		r.mu.Lock()
		if r.state != StateDone {
			if ev.Out != nil {
				r.lastSeq = ev.Seq
			} else {
				r.status = ev.State
			}
			e := Entry{Seq: r.lastSeq, Event: ev}
			if ev.Out == nil {
				r.noteStatusLocked(e)
			}
			r.emitLocked(e)
		}
		r.mu.Unlock()
	}
}

func (r *Record) complete(ev Event) {
	r.mu.Lock()
	if r.state == StateDone {
		r.mu.Unlock()
		return
	}
	r.endLogLocked()
	r.state, r.ended, r.result, r.runner = StateDone, time.Now(), ev.Result, nil // a finished record keeps no session alive
	r.resultLen = resultSize(ev.Result)
	r.emitLocked(Entry{Seq: r.lastSeq, Event: ev})
	r.closeSinksLocked()
	r.mu.Unlock()
	close(r.done)
	r.x.finish(r)
}

// endLogLocked takes the log of a record that stops running out of the
// store's running sum.
func (r *Record) endLogLocked() {
	r.x.runningLog.Add(-int64(r.logBytes))
}

// emitLocked keeps e (outputs within LogBytes, the oldest dropped; only
// the last status) and hands it to every follower.
func (r *Record) emitLocked(e Entry) {
	if e.Event.Out != nil {
		before := r.logBytes
		if n := e.Event.Size() + entryOverhead; n > r.x.cfg.LogBytes {
			// One output over the whole bound (a flood printed at once) is
			// not kept: the log starts after it. Followers still get it.
			for _, old := range r.entries {
				r.noteDroppedLocked(old.Event.Out)
			}
			r.noteDroppedLocked(e.Event.Out)
			r.entries, r.logBytes, r.firstSeq = nil, 0, e.Seq+1
		} else {
			r.entries = append(r.entries, e)
			r.logBytes += n
			for r.logBytes > r.x.cfg.LogBytes {
				old := r.entries[0]
				r.noteDroppedLocked(old.Event.Out)
				r.entries[0] = Entry{}
				r.entries = r.entries[1:]
				r.logBytes -= old.Event.Size() + entryOverhead
				r.firstSeq = old.Seq + 1
			}
		}
		if r.state != StateDone {
			r.x.runningLog.Add(int64(r.logBytes - before))
		}
	}
	for f := range r.sinks {
		f.deliver(e)
	}
}

func (r *Record) closeSinksLocked() {
	for f := range r.sinks {
		delete(r.sinks, f)
	}
}

func (r *Record) endedAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// heldBytes is what a finished record holds: its log and its result.
func (r *Record) heldBytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return 512 + len(r.key.Code) + r.logBytes + r.resultLen
}

// release drops what an evicted record holds.
func (r *Record) release() {
	r.mu.Lock()
	r.entries, r.result, r.logBytes = nil, nil, 0
	r.mu.Unlock()
}

// Follow replays the entries after output seq `after` to deliver, then
// hands it every later entry as it comes, until the result (which ends it)
// or detach. The replay is the held outputs past after, the current status
// when the execution runs, and the result (or the failure to run) when it is done.
// deliver is called with the record locked and must not block. When
// outputs after `after` were dropped, Follow returns a *GoneError naming
// the first seq still held.
func (r *Record) Follow(after int, deliver func(Entry)) (detach func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.x != nil && r.entries == nil && r.result == nil && r.runErr == nil && r.state == StateDone {
		return nil, &GoneError{ID: r.ID, At: r.ended, Why: "evicted"}
	}
	if after < 0 {
		after = 0
	}
	if after+1 < r.firstSeq {
		return nil, &GoneError{ID: r.ID, FirstSeq: r.firstSeq,
			Why: fmt.Sprintf("an execution's log keeps the last %d bytes of output", r.x.cfg.LogBytes)}
	}
	for _, e := range r.entries {
		if e.Seq > after {
			deliver(e)
		}
	}
	switch {
	case r.state == StateDone && r.runErr != nil:
		deliver(Entry{Seq: r.lastSeq, Err: r.runErr})
		return func() {}, nil
	case r.state == StateDone:
		deliver(Entry{Seq: r.lastSeq, Event: Event{ExecID: r.ID, ExecutionID: r.ID, Result: r.result}})
		return func() {}, nil
	case r.status != "":
		deliver(Entry{Seq: r.lastSeq, Event: Event{ExecutionID: r.ID, State: r.status}})
	}
	f := &follower{deliver: deliver}
	r.sinks[f] = struct{}{}
	return func() {
		r.mu.Lock()
		delete(r.sinks, f)
		r.mu.Unlock()
	}, nil
}

type follower struct{ deliver func(Entry) }

// resultSize approximates what a result holds.
func resultSize(res *Result) int {
	if res == nil {
		return 0
	}
	n := 512 + len(res.Code)
	for _, o := range res.Outputs {
		n += 64 + len(o.Text) + len(o.Metadata)
		for _, v := range o.Data {
			n += len(v)
		}
		for _, l := range o.Traceback {
			n += len(l)
		}
	}
	return n
}
