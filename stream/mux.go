package stream

import (
	"sync"
	"sync/atomic"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Mux routes the messages of one session's runtime. The runtime's reader
// goroutines call the handler from Handler; the mux looks the execution up
// by parent msg_id, folds the message into its collector, hands it to the
// execution's subscribers, then to every watcher of the session. Nothing in
// that path blocks: collectors fold in place, subscribers only enqueue.
type Mux struct {
	gen      atomic.Uint64                // generation of the current runtime
	watchers atomic.Pointer[[]Subscriber] // copy-on-write

	mu    sync.Mutex // guards execs and the watcher list's writers
	execs map[string]*Execution

	stale atomic.Int64 // messages dropped because their runtime was replaced

	onLarge func() // called after a message over largeMessage bytes was handed on
}

// largeMessage is the size past which the mux asks for memory to be handed
// back: a kernel can send one 100 MB stream message, which the collector
// keeps only 8 MiB of.
const largeMessage = 16 << 20

// NewMux returns an empty mux.
func NewMux() *Mux {
	m := &Mux{execs: map[string]*Execution{}}
	m.watchers.Store(&[]Subscriber{})
	return m
}

// Handler returns the handler for the runtime of generation gen; messages
// from an older runtime are dropped and counted.
func (m *Mux) Handler(gen uint64) jupyter.Handler {
	return func(msg *jupyter.Message) { m.deliver(gen, msg) }
}

// NextGen starts a new runtime generation and returns it.
func (m *Mux) NextGen() uint64 { return m.gen.Add(1) }

func (m *Mux) deliver(gen uint64, msg *jupyter.Message) {
	if gen != m.gen.Load() {
		m.stale.Add(1)
		return
	}
	id := msg.Parent.MsgID
	m.mu.Lock()
	ex := m.execs[id]
	m.mu.Unlock()
	ref := ""
	if ex != nil {
		ex.add(msg)
		ref = ex.Ref
	}
	ev := Event{ExecID: id, Ref: ref, Msg: msg}
	for _, w := range *m.watchers.Load() {
		w.Deliver(ev)
	}
	if m.onLarge != nil && len(msg.Content) > largeMessage {
		m.onLarge()
	}
}

// publishResult tells every watcher that an execution finished.
func (m *Mux) publishResult(ex *Execution, r *Result) {
	ev := Event{ExecID: ex.ID, Ref: ex.Ref, Result: r}
	for _, s := range ex.subscribers() {
		s.Deliver(ev)
	}
	for _, w := range *m.watchers.Load() {
		w.Deliver(ev)
	}
}

// Watch adds a session-wide subscriber: it receives every message of the
// session and every execution's result, whoever started it.
func (m *Mux) Watch(s Subscriber) {
	m.mu.Lock()
	old := *m.watchers.Load()
	next := append(append(make([]Subscriber, 0, len(old)+1), old...), s)
	m.watchers.Store(&next)
	m.mu.Unlock()
}

// Unwatch removes a session-wide subscriber.
func (m *Mux) Unwatch(s Subscriber) {
	m.mu.Lock()
	old := *m.watchers.Load()
	next := make([]Subscriber, 0, len(old))
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
// can arrive unrouted.
func (m *Mux) Begin(id, ref string, budget int, subs ...Subscriber) *Execution {
	ex := &Execution{
		ID:       id,
		Ref:      ref,
		col:      NewCollector(budget),
		subs:     subs,
		replied:  make(chan struct{}),
		idled:    make(chan struct{}),
		activity: make(chan struct{}, 1),
	}
	m.mu.Lock()
	m.execs[id] = ex
	m.mu.Unlock()
	return ex
}

// End forgets an execution; later messages with its parent only reach watchers.
func (m *Mux) End(ex *Execution) {
	m.mu.Lock()
	delete(m.execs, ex.ID)
	m.mu.Unlock()
}

// Execution is one execute request in flight: its collector, its own
// subscribers, and the two signals that together mean it is complete
// (shell execute_reply and iopub idle, both parented to ID).
type Execution struct {
	ID  string // msg_id of the execute_request
	Ref string // the caller's reference, e.g. a WebSocket message id

	replied  chan struct{} // closed on execute_reply
	idled    chan struct{} // closed on iopub status idle
	activity chan struct{} // poked (never blocking) on every message
	folding  atomic.Int32  // messages being folded right now

	mu    sync.Mutex // guards everything below
	col   *Collector
	subs  []Subscriber
	reply replyContent
	gotR  bool
	gotI  bool
}

type replyContent struct {
	Status         string `json:"status"`
	ExecutionCount *int   `json:"execution_count"`
	Ename          string `json:"ename"`
	Evalue         string `json:"evalue"`
}

type statusContent struct {
	ExecutionState string `json:"execution_state"`
}

// Subscribe adds a subscriber to this execution only.
func (ex *Execution) Subscribe(s Subscriber) {
	ex.mu.Lock()
	ex.subs = append(ex.subs, s)
	ex.mu.Unlock()
}

func (ex *Execution) subscribers() []Subscriber {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return append([]Subscriber(nil), ex.subs...)
}

func (ex *Execution) add(msg *jupyter.Message) {
	ex.folding.Add(1)
	defer ex.folding.Add(-1)
	ex.poke() // folding a huge message can take a while: it counts as activity
	ex.mu.Lock()
	switch {
	case msg.Header.MsgType == "execute_reply":
		if !ex.gotR {
			_ = json.Unmarshal(msg.Content, &ex.reply)
			ex.gotR = true
			close(ex.replied)
		}
	case msg.Header.MsgType == "status":
		var st statusContent
		if json.Unmarshal(msg.Content, &st) == nil && st.ExecutionState == "idle" && !ex.gotI {
			ex.gotI = true
			close(ex.idled)
		}
	case msg.Channel == "iopub":
		ex.col.Add(msg)
	}
	subs := ex.subs
	ex.mu.Unlock()
	ex.poke()
	ev := Event{ExecID: ex.ID, Ref: ex.Ref, Msg: msg}
	for _, s := range subs {
		s.Deliver(ev)
	}
}

func (ex *Execution) poke() {
	select {
	case ex.activity <- struct{}{}:
	default:
	}
}
