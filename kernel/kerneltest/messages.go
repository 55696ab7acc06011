package kerneltest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Stamped is a message and when the handler got it.
type Stamped struct {
	*jupyter.Message
	At time.Time
}

// Recorder is a jupyter.Handler (Handle) that keeps every message a runtime
// delivers and wakes those waiting for one: the one recorder the runtime
// packages' tests share.
type Recorder struct {
	mu   sync.Mutex
	msgs []Stamped
	poke chan struct{}
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{poke: make(chan struct{}, 1)} }

// Handle keeps m; pass it as a runtime's Handler.
func (r *Recorder) Handle(m *jupyter.Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, Stamped{m, time.Now()})
	r.mu.Unlock()
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// All returns every message so far, in arrival order.
func (r *Recorder) All() []*jupyter.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*jupyter.Message, len(r.msgs))
	for i, m := range r.msgs {
		out[i] = m.Message
	}
	return out
}

// Stamped returns the messages parented to msgID with their arrival times.
func (r *Recorder) Stamped(msgID string) []Stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Stamped
	for _, m := range r.msgs {
		if m.Parent.MsgID == msgID {
			out = append(out, m)
		}
	}
	return out
}

// Children returns the messages parented to msgID, in arrival order.
func (r *Recorder) Children(msgID string) []*jupyter.Message {
	var out []*jupyter.Message
	for _, m := range r.Stamped(msgID) {
		out = append(out, m.Message)
	}
	return out
}

// WaitUntil evaluates cond on every new message until it holds or limit
// passes, and reports whether it held.
func (r *Recorder) WaitUntil(limit time.Duration, cond func() bool) bool {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for !cond() {
		select {
		case <-r.poke:
		case <-timer.C:
			return cond()
		}
	}
	return true
}

// WaitFor waits up to limit until cond holds for the children of msgID,
// and fails the test (naming what) when it does not.
func (r *Recorder) WaitFor(t testing.TB, limit time.Duration, msgID, what string, cond func([]*jupyter.Message) bool) []*jupyter.Message {
	t.Helper()
	var ms []*jupyter.Message
	if !r.WaitUntil(limit, func() bool { ms = r.Children(msgID); return cond(ms) }) {
		t.Fatalf("no %s for %s within %s; got %s", what, msgID, limit, Summary(ms))
	}
	return ms
}

// Complete reports whether both execute_reply and iopub status idle are
// among ms.
func Complete(ms []*jupyter.Message) bool {
	return Find(ms, jupyter.Shell, jupyter.MsgExecuteReply) != nil && FindStatus(ms, jupyter.StateIdle) != nil
}

// Find returns the first message of msgType on channel, or nil.
func Find(ms []*jupyter.Message, channel, msgType string) *jupyter.Message {
	for _, m := range ms {
		if m.Channel == channel && m.Header.MsgType == msgType {
			return m
		}
	}
	return nil
}

// FindStatus returns the first iopub status message with that state, or nil.
func FindStatus(ms []*jupyter.Message, state string) *jupyter.Message {
	for _, m := range ms {
		if m.Channel == jupyter.IOPub && m.Header.MsgType == jupyter.MsgStatus && Field(m, "execution_state") == state {
			return m
		}
	}
	return nil
}

// Field returns a top-level string field of m's content, or "".
func Field(m *jupyter.Message, name string) string {
	var c map[string]any
	if json.Unmarshal(m.Content, &c) != nil {
		return ""
	}
	s, _ := c[name].(string)
	return s
}

// StreamText joins the text of the stream messages of one name.
func StreamText(ms []*jupyter.Message, name string) string {
	var b strings.Builder
	for _, m := range ms {
		if m.Header.MsgType == jupyter.MsgStream && Field(m, "name") == name {
			b.WriteString(Field(m, "text"))
		}
	}
	return b.String()
}

// Summary renders ms for failure messages: channel/type, with the status,
// stream text or error name.
func Summary(ms []*jupyter.Message) string {
	var parts []string
	for _, m := range ms {
		s := m.Channel + "/" + m.Header.MsgType
		switch m.Header.MsgType {
		case jupyter.MsgStatus:
			s += "(" + Field(m, "execution_state") + ")"
		case jupyter.MsgStream:
			s += fmt.Sprintf("(%q)", Field(m, "text"))
		case jupyter.MsgError:
			s += "(" + Field(m, "ename") + ")"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
