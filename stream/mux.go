package stream

import (
	"sync"
	"sync/atomic"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
)

// Mux routes the messages of one session's runtime. The runtime's reader
// goroutines call the handler from Handler; the mux decodes the message
// once, looks the execution up by parent msg_id, folds the message into its
// collector, hands the event to the execution's subscribers, then to every
// watcher of the session, and only then signals the execution's completion,
// so that a result never overtakes the idle of its own execution. Nothing in
// that path blocks: collectors fold in place, subscribers only enqueue.
type Mux struct {
	gen      atomic.Uint64                          // generation of the current runtime
	watchers atomic.Pointer[[]execution.Subscriber] // copy-on-write
	state    atomic.Pointer[string]                 // last execution_state of the current runtime

	mu    sync.Mutex // guards execs and the watcher list's writers
	execs map[string]*Execution
	busy  atomic.Int32 // len(execs), read without mu (Held of an idle mux)

	counters *Counters
	onLarge  func()        // called after a message over largeMessage bytes was handed on
	outBytes *atomic.Int64 // where output bytes are counted; nil: not counted
}

// largeMessage is the size past which the mux asks for memory to be handed
// back: a kernel can send one 100 MB stream message, which the collector
// keeps only 8 MiB of.
const largeMessage = 16 << 20

// NewMux returns an empty mux counting into c (nil: counters of its own).
func NewMux(c *Counters) *Mux {
	if c == nil {
		c = NewCounters()
	}
	m := &Mux{execs: map[string]*Execution{}, counters: c}
	m.watchers.Store(&[]execution.Subscriber{})
	return m
}

// Handler returns the handler for the runtime of generation gen; messages
// from an older runtime are dropped and counted.
func (m *Mux) Handler(gen uint64) jupyter.Handler {
	return func(msg *jupyter.Message) { m.deliver(gen, msg) }
}

// NextGen starts a new runtime generation and returns it.
func (m *Mux) NextGen() uint64 {
	m.state.Store(nil)
	return m.gen.Add(1)
}

// State is the last execution_state the current runtime published, or "".
func (m *Mux) State() string {
	if p := m.state.Load(); p != nil {
		return *p
	}
	return ""
}

func (m *Mux) deliver(gen uint64, msg *jupyter.Message) {
	if gen != m.gen.Load() {
		m.counters.Count(StaleMessages, "", 1)
		return
	}
	ev := execution.Event{ExecID: msg.Parent.MsgID, Msg: msg}
	m.mu.Lock()
	ex := m.execs[ev.ExecID]
	m.mu.Unlock()
	if ex != nil {
		// Decoding and folding a huge message can take a while: it counts
		// as activity, so that the completion wait does not give up on it.
		ex.folding.Add(1)
		defer ex.folding.Add(-1)
		ex.poke()
		ev.Origin, ev.ExecutionID = ex.Origin, ex.ExecutionID
	}
	ev.Parse()
	if ex != nil && ev.Out != nil {
		ev.Seq = int(ex.seq.Add(1))
	}
	if ev.Out != nil && m.outBytes != nil {
		m.outBytes.Add(int64(len(msg.Content)))
	}
	if ev.State != "" {
		st := ev.State
		m.state.Store(&st)
	}
	// Help and other pager text arrives as a payload of the reply: it is
	// handed on as an output of its own, before the reply, so that every
	// route (REST results, WebSocket outputs, watchers) sees the same one.
	for _, o := range ev.Pages {
		pe := execution.Event{ExecID: ev.ExecID, ExecutionID: ev.ExecutionID, Origin: ev.Origin, Out: o}
		if ex != nil {
			pe.Seq = int(ex.seq.Add(1))
		}
		m.deliverOutput(ex, pe)
	}
	var complete func()
	if ex != nil {
		complete = ex.add(ev)
	}
	if ex == nil || !ex.internal {
		for _, w := range *m.watchers.Load() {
			w.Deliver(ev)
		}
	}
	if complete != nil {
		complete()
	}
	if m.onLarge != nil && len(msg.Content) > largeMessage {
		m.onLarge()
	}
}

// deliverOutput hands an output event that no runtime message carries
// (Msg nil) to the execution, when there is one, and to every watcher.
func (m *Mux) deliverOutput(ex *Execution, ev execution.Event) {
	if ex != nil {
		ex.add(ev)
	}
	m.publish(ev)
}

// publish tells the execution's subscribers and every watcher that an
// execution finished.
func (m *Mux) publishResult(ex *Execution, r *execution.Result) {
	ev := execution.Event{ExecID: ex.ID, ExecutionID: ex.ExecutionID, Seq: int(ex.seq.Load()), Origin: ex.Origin, Result: r}
	for _, s := range ex.subscribers() {
		s.Deliver(ev)
	}
	m.publish(ev)
}

// publish hands ev to every watcher.
func (m *Mux) publish(ev execution.Event) {
	for _, w := range *m.watchers.Load() {
		w.Deliver(ev)
	}
}

// Watch adds a session-wide subscriber: it receives every message of the
// session and every execution's result, whoever started it.
func (m *Mux) Watch(s execution.Subscriber) {
	m.mu.Lock()
	old := *m.watchers.Load()
	next := append(append(make([]execution.Subscriber, 0, len(old)+1), old...), s)
	m.watchers.Store(&next)
	m.mu.Unlock()
}

// Unwatch removes a session-wide subscriber.
func (m *Mux) Unwatch(s execution.Subscriber) {
	m.mu.Lock()
	old := *m.watchers.Load()
	next := make([]execution.Subscriber, 0, len(old))
	for _, w := range old {
		if w != s {
			next = append(next, w)
		}
	}
	m.watchers.Store(&next)
	m.mu.Unlock()
}

// Watchers is the number of session-wide subscribers.
func (m *Mux) Watchers() int { return len(*m.watchers.Load()) }

// Begin registers an execution before its request is sent, so that no reply
// can arrive unrouted. Its events carry executionID and origin.
func (m *Mux) Begin(id, executionID string, origin any, budget int, subs ...execution.Subscriber) *Execution {
	return m.begin(id, executionID, origin, budget, false, subs)
}

// beginInternal is Begin for aiod's own execution (Session.Internal):
// watchers do not see it.
func (m *Mux) beginInternal(id string, budget int) *Execution {
	return m.begin(id, "", nil, budget, true, nil)
}

func (m *Mux) begin(id, executionID string, origin any, budget int, internal bool, subs []execution.Subscriber) *Execution {
	ex := &Execution{
		internal:    internal,
		ID:          id,
		ExecutionID: executionID,
		Origin:      origin,
		col:         execution.NewCollector(budget),
		subs:        subs,
		replied:     make(chan struct{}),
		idled:       make(chan struct{}),
		activity:    make(chan struct{}, 1),
		asked:       make(chan struct{}, 1),
	}
	m.mu.Lock()
	m.execs[id] = ex
	m.busy.Store(int32(len(m.execs)))
	m.mu.Unlock()
	return ex
}

// Held is what the collectors of its running executions hold
// (execution.Collector.Held).
func (m *Mux) Held() int64 {
	m.mu.Lock()
	exs := make([]*Execution, 0, len(m.execs))
	for _, ex := range m.execs {
		exs = append(exs, ex)
	}
	m.mu.Unlock()
	var n int64
	for _, ex := range exs {
		ex.mu.Lock()
		n += int64(ex.col.Held())
		ex.mu.Unlock()
	}
	return n
}

// End forgets an execution; later messages with its parent only reach watchers.
func (m *Mux) End(ex *Execution) {
	m.mu.Lock()
	delete(m.execs, ex.ID)
	m.busy.Store(int32(len(m.execs)))
	m.mu.Unlock()
}

// Execution is one execute request in flight: its collector, its own
// subscribers, and the two signals that together mean it is complete
// (shell execute_reply and iopub idle, both parented to ID).
type Execution struct {
	ID          string       // msg_id of the execute_request
	ExecutionID string       // the store's id of it
	Origin      any          // who started it (ExecRequest.Origin)
	seq         atomic.Int64 // outputs so far

	replied  chan struct{} // closed on execute_reply
	idled    chan struct{} // closed on iopub status idle
	activity chan struct{} // poked (never blocking) on every message
	asked    chan struct{} // poked when a client's interrupt reached the runtime (Session.Interrupt)
	folding  atomic.Int32  // messages being folded right now
	// signs counts the messages that can answer an interrupt (an output,
	// the reply, idle): a busy status or the echo of the code that arrives
	// after the interrupt was asked is the execution's start, late.
	signs    atomic.Uint64
	internal bool // aiod's own (Session.Internal): watchers do not see it

	mu          sync.Mutex // guards everything below
	col         *execution.Collector
	subs        []execution.Subscriber
	reply       jupyter.ExecuteReplyContent
	gotR        bool
	gotI        bool
	result      bool   // an execute_result was published: the code's last line ran
	resultCount *int   // its execution_count
	nextInput   string // a set_next_input payload's text
	interruptBy string // who interrupted it (Session.Interrupt, a timeout)
}

// interrupted records who interrupted the execution; the first one counts.
func (ex *Execution) interrupted(by string) {
	ex.mu.Lock()
	if ex.interruptBy == "" {
		ex.interruptBy = by
	}
	ex.mu.Unlock()
}

// uninterrupted forgets an interrupt by that did not reach the runtime.
func (ex *Execution) uninterrupted(by string) {
	ex.mu.Lock()
	if ex.interruptBy == by {
		ex.interruptBy = ""
	}
	ex.mu.Unlock()
}

// Subscribe adds a subscriber to this execution only.
func (ex *Execution) Subscribe(s execution.Subscriber) {
	ex.mu.Lock()
	ex.subs = append(ex.subs, s)
	ex.mu.Unlock()
}

func (ex *Execution) subscribers() []execution.Subscriber {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return append([]execution.Subscriber(nil), ex.subs...)
}

// add folds ev into the execution and hands it to its subscribers. It
// returns the completion signal ev brings (closing replied or idled), for
// the mux to fire once every watcher has ev too; nil when it brings none.
func (ex *Execution) add(ev execution.Event) (complete func()) {
	ex.mu.Lock()
	switch {
	case ev.Reply != nil:
		if !ex.gotR {
			ex.reply = *ev.Reply
			ex.nextInput = ev.NextInput
			ex.gotR = true
			complete = func() { close(ex.replied) }
		}
	case ev.State == jupyter.StateIdle:
		if !ex.gotI {
			ex.gotI = true
			complete = func() { close(ex.idled) }
		}
	case ev.Out != nil:
		ex.col.Add(ev.Out)
		if ev.Out.Type == "execute_result" && !ex.result {
			ex.result, ex.resultCount = true, ev.Out.ExecutionCount
		}
	}
	if ev.Reply != nil || ev.State == jupyter.StateIdle || ev.Out != nil {
		ex.signs.Add(1)
	}
	subs := ex.subs
	ex.mu.Unlock()
	ex.poke()
	for _, s := range subs {
		s.Deliver(ev)
	}
	return complete
}

func (ex *Execution) poke() {
	select {
	case ex.activity <- struct{}{}:
	default:
	}
}
