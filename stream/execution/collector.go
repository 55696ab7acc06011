package execution

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// DefaultBudget is the default cap on one execution's collected output.
const DefaultBudget = 8 << 20

// Collector folds one execution's iopub messages into the outputs a notebook
// would show at the end: consecutive stream chunks of one name merged,
// clear_output and update_display_data applied, tracebacks without ANSI
// codes (Result.Plain strips them from stream text too, for REST).
//
// Memory is bounded by the budget: past it, each stream keeps its head (what
// was collected before the budget ran out) and a tail ring of budget/32
// bytes; rich outputs that no longer fit are replaced by a short note.
// Stream text counts twice: every REST answer carries it twice, in its
// outputs and in the stdout and stderr digest, and the answer is to stay
// within the budget (a 100 MB print answered 19 MB against 8 MiB): a flood
// answers the budget and its stream's tail, twice (a sixteenth more).
// A Collector is not safe for concurrent use; Execution serialises it.
type Collector struct {
	budget    int
	used      int
	outputs   []*Output
	clearWait bool
	truncated bool
	tails     map[string]*tailRing // stream name -> tail kept past the budget
	omitted   int                  // rich outputs replaced by a note
	finished  bool                 // Finish has handed the outputs out
	held      int                  // bytes its outputs and tails hold (Held)
}

// streamWeight is what one byte of stream text counts against the budget:
// the answer carries it twice (outputs, and stdout or stderr).
const streamWeight = 2

// NewCollector returns a collector with the given budget in bytes
// (<= 0 means DefaultBudget).
func NewCollector(budget int) *Collector {
	if budget <= 0 {
		budget = DefaultBudget
	}
	return &Collector{budget: budget}
}

// Add folds one decoded output (Decode). The collector never changes o:
// it is shared with every other subscriber of the message. Once Finish has
// handed the outputs out, Add drops what comes (output a runtime prints
// after the answer was assembled, such as the tail of an interrupted
// loop): the answer is being written from them and must not change.
func (c *Collector) Add(o *Output) {
	if c.finished {
		return
	}
	switch o.Type {
	case jupyter.MsgStream:
		c.applyClearWait()
		o.streamChunks(func(b []byte) { c.addStream(o.Name, b) })
	case jupyter.MsgClearOutput:
		if o.Wait {
			c.clearWait = true
		} else {
			c.clear()
		}
	case jupyter.MsgUpdateDisplayData:
		c.updateDisplay(o)
	case jupyter.MsgError:
		c.applyClearWait()
		cp := *o
		c.addRich(&cp, len(o.Ename)+len(o.Evalue)+sumLen(o.Traceback))
	case jupyter.MsgExecuteResult, jupyter.MsgDisplayData:
		c.applyClearWait()
		cp := *o
		c.addRich(&cp, bundleSize(o.Data)+len(o.Metadata))
	}
}

// applyClearWait clears the outputs when clear_output(wait=True) is pending.
func (c *Collector) applyClearWait() {
	if c.clearWait {
		c.clearWait = false
		c.clear()
	}
}

func (c *Collector) clear() {
	c.outputs, c.used, c.tails, c.held = nil, 0, nil, 0
}

// Held is about what the collector's outputs hold in memory: stream text
// (once, where the budget counts it twice), rich outputs and tail rings.
// The daemon leaves such bytes out of what its GC may double (Held in
// stream.Registry).
func (c *Collector) Held() int { return c.held }

// tailSize is the tail ring of a stream past budget.
func tailSize(budget int) int { return max(budget/(16*streamWeight), 1024) }

func (c *Collector) addStream(name string, text []byte) {
	if tail := c.tails[name]; tail != nil || c.used >= c.budget {
		c.toTail(name, text)
		return
	}
	room := (c.budget - c.used) / streamWeight
	head := text
	if len(head) > room {
		head = cutUTF8(head, room)
	}
	if len(head) > 0 {
		var o *Output
		if n := len(c.outputs); n > 0 && c.outputs[n-1].Type == "stream" && c.outputs[n-1].Name == name {
			o = c.outputs[n-1]
		} else {
			o = &Output{Type: "stream", Name: name, text: &textBuf{}}
			c.outputs = append(c.outputs, o)
		}
		o.text.Write(head, o.text.n+room) // room: what the budget leaves for any stream
		c.used += streamWeight * len(head)
		c.held += len(head)
	}
	if rest := text[len(head):]; len(rest) > 0 {
		c.toTail(name, rest)
	}
}

func (c *Collector) toTail(name string, text []byte) {
	c.truncated = true
	if c.tails == nil {
		c.tails = map[string]*tailRing{}
	}
	t := c.tails[name]
	if t == nil {
		t = newTailRing(tailSize(c.budget))
		c.tails[name] = t
		c.held += cap(t.buf)
		for i := len(c.outputs) - 1; i >= 0; i-- {
			if o := c.outputs[i]; o.Type == "stream" && o.Name == name {
				o.Truncated = true
				break
			}
		}
	}
	t.write(text)
}

func (c *Collector) addRich(o *Output, size int) {
	if c.used+size > c.budget {
		c.truncated = true
		c.omitted++
		note := fmt.Sprintf("[aiod: %s output of %d bytes omitted: over the %s output budget]", o.Type, size, human(c.budget))
		if o.Type == "error" {
			o.Traceback = []string{note}
		} else {
			o.Data = map[string]json.RawMessage{"text/plain": mustJSON(note)}
			o.Metadata = nil
		}
		o.Truncated = true
		size = len(note)
	}
	c.used += size
	c.held += size
	c.outputs = append(c.outputs, o)
}

func (c *Collector) updateDisplay(ct *Output) {
	id := ct.DisplayID
	if id == "" {
		return
	}
	for _, o := range c.outputs {
		if o.DisplayID != id {
			continue
		}
		size := bundleSize(ct.Data) + len(ct.Metadata)
		old := bundleSize(o.Data) + len(o.Metadata)
		if c.used-old+size > c.budget {
			c.truncated = true
			continue
		}
		c.used += size - old
		c.held += size - old
		o.Data, o.Metadata = ct.Data, ct.Metadata
	}
}

// Truncated reports whether the budget cut anything so far.
func (c *Collector) Truncated() bool { return c.truncated }

// Finish returns the folded outputs. Streams that ran past the budget get a
// closing output holding a note and their tail.
func (c *Collector) Finish() []*Output {
	if c.finished {
		return c.outputs
	}
	c.finished = true
	for _, o := range c.outputs {
		if o.text != nil {
			o.Text, o.text = o.text.String(), nil
		}
	}
	for _, name := range []string{"stdout", "stderr"} {
		t := c.tails[name]
		if t == nil {
			continue
		}
		tail, dropped := t.finish()
		note := fmt.Sprintf("\n[aiod: %s of %s omitted: output over the %s budget; head and last %s kept]\n",
			human(int(dropped)), name, human(c.budget), human(len(tail)))
		c.outputs = append(c.outputs, &Output{Type: "stream", Name: name, Text: note + tail, Truncated: true})
	}
	c.tails = nil
	return c.outputs
}

// Note explains what the budget did, or "" when nothing was cut.
func (c *Collector) Note() string {
	if !c.truncated {
		return ""
	}
	return fmt.Sprintf("output truncated: over the %s output budget (head and tail of each stream kept)", human(c.budget))
}

func sumLen(ss []string) int {
	n := 0
	for _, s := range ss {
		n += len(s)
	}
	return n
}

func bundleSize(b map[string]json.RawMessage) int {
	n := 0
	for k, v := range b {
		n += len(k) + len(v)
	}
	return n
}

func mustJSON(s string) json.RawMessage {
	b, _ := json.MarshalWithOption(s, json.DisableHTMLEscape())
	return b
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// split a rune.
func cutUTF8(s []byte, n int) []byte {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func human(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// tailRing keeps the last max bytes written to it.
type tailRing struct {
	buf     []byte
	pos     int // next write position once full
	full    bool
	written int64
}

func newTailRing(max int) *tailRing { return &tailRing{buf: make([]byte, 0, max)} }

func (t *tailRing) write(s []byte) {
	t.written += int64(len(s))
	max := cap(t.buf)
	if len(s) >= max {
		t.buf = append(t.buf[:0], s[len(s)-max:]...)
		t.pos, t.full = 0, true
		return
	}
	if !t.full {
		room := max - len(t.buf)
		if len(s) <= room {
			t.buf = append(t.buf, s...)
			return
		}
		t.buf = append(t.buf, s[:room]...)
		s = s[room:]
		t.full, t.pos = true, 0
	}
	for len(s) > 0 {
		n := copy(t.buf[t.pos:], s)
		s = s[n:]
		t.pos = (t.pos + n) % max
	}
}

// finish returns the kept tail (starting on a rune boundary) and how many
// written bytes it does not hold.
func (t *tailRing) finish() (string, int64) {
	var b []byte
	if t.full {
		b = append(append(b, t.buf[t.pos:]...), t.buf[:t.pos]...)
	} else {
		b = t.buf
	}
	i := 0
	for i < len(b) && i < utf8.UTFMax && !utf8.RuneStart(b[i]) {
		i++
	}
	b = b[i:]
	return string(b), t.written - int64(len(b))
}

// textBuf is a stream's text while it is folded, in blocks joined once by
// String: n bytes cost n bytes of copying and one block of slack, where
// one doubling buffer copied about 2n more and left as much garbage (a
// flood arrives in messages of about 1 MiB, each smaller than the budget).
//
// Past maxTextBlock the text moves into one buffer of the most it may
// ever hold (what the budget leaves it), which String hands over without
// a copy when it is at least half full: a flood's 4 MiB head was held
// twice at its end, in blocks and joined.
type textBuf struct {
	blocks [][]byte
	n      int
	one    *strings.Builder // past maxTextBlock: all of the text
}

// maxTextBlock bounds a block made to hold small writes.
const maxTextBlock = 1 << 20

// Write appends p; limit is the most the text may ever hold.
func (t *textBuf) Write(p []byte, limit int) {
	if t.one == nil && t.n+len(p) > maxTextBlock {
		t.one = &strings.Builder{}
		t.one.Grow(max(limit, t.n+len(p)))
		for _, b := range t.blocks {
			t.one.Write(b)
		}
		t.blocks = nil
	}
	t.n += len(p)
	if t.one != nil {
		t.one.Write(p)
		return
	}
	if k := len(t.blocks); k > 0 {
		last := t.blocks[k-1]
		m := min(cap(last)-len(last), len(p))
		t.blocks[k-1] = append(last, p[:m]...)
		p = p[m:]
	}
	if len(p) > 0 {
		// A block as large as the text so far (1 KiB at least, 1 MiB at
		// most, unless p alone is larger).
		b := make([]byte, 0, max(len(p), min(max(t.n, 1024), maxTextBlock)))
		t.blocks = append(t.blocks, append(b, p...))
	}
}

// String joins the blocks, or hands over the one buffer (copied to its
// size when it is less than half full).
func (t *textBuf) String() string {
	if t.one != nil {
		s := t.one.String()
		if 2*len(s) < t.one.Cap() {
			return strings.Clone(s)
		}
		return s
	}
	if len(t.blocks) == 1 {
		return string(t.blocks[0])
	}
	var b strings.Builder
	b.Grow(t.n)
	for _, p := range t.blocks {
		b.Write(p)
	}
	return b.String()
}
