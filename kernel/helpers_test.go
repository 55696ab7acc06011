package kernel

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Generous: the test machine has two busy cores.
const (
	startTimeout = 90 * time.Second
	execTimeout  = 60 * time.Second
)

// recorder is a jupyter.Handler that keeps every message and wakes waiters.
type recorder struct {
	mu   sync.Mutex
	msgs []*jupyter.Message
	poke chan struct{}
}

func newRecorder() *recorder { return &recorder{poke: make(chan struct{}, 1)} }

func (r *recorder) handle(m *jupyter.Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// children returns the messages parented to msgID, in arrival order.
func (r *recorder) children(msgID string) []*jupyter.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*jupyter.Message
	for _, m := range r.msgs {
		if m.Parent.MsgID == msgID {
			out = append(out, m)
		}
	}
	return out
}

// waitFor waits until cond holds for the children of msgID.
func (r *recorder) waitFor(t testing.TB, msgID string, what string, cond func([]*jupyter.Message) bool) []*jupyter.Message {
	t.Helper()
	deadline := time.NewTimer(execTimeout)
	defer deadline.Stop()
	for {
		ms := r.children(msgID)
		if cond(ms) {
			return ms
		}
		select {
		case <-r.poke:
		case <-deadline.C:
			t.Fatalf("no %s for %s within %s; got %s", what, msgID, execTimeout, summary(ms))
		}
	}
}

// complete reports whether both execute_reply and status idle are there.
func complete(ms []*jupyter.Message) bool {
	return find(ms, "shell", "execute_reply") != nil && findStatus(ms, "idle") != nil
}

// startKernel starts the default Python kernel and closes it at cleanup.
func startKernel(t testing.TB, mod func(*Options)) (*Kernel, *recorder) {
	t.Helper()
	k, rec, err := tryStartKernel(t, mod)
	if err != nil {
		t.Fatal(err)
	}
	return k, rec
}

// tryStartKernel is startKernel for goroutines other than the test's.
func tryStartKernel(t testing.TB, mod func(*Options)) (*Kernel, *recorder, error) {
	spec, err := DefaultPythonSpec()
	if err != nil {
		return nil, nil, err
	}
	rec := newRecorder()
	opts := Options{Spec: spec, Handler: rec.handle, Logger: testLogger(), StartTimeout: startTimeout}
	if mod != nil {
		mod(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	k, err := Start(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() {
		if err := k.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return k, rec, nil
}

// run executes code and returns its messages once complete.
func run(t testing.TB, k *Kernel, rec *recorder, code string) []*jupyter.Message {
	t.Helper()
	id := execute(t, k, code)
	return rec.waitFor(t, id, "execute_reply and idle", complete)
}

func execute(t testing.TB, k *Kernel, code string) string {
	t.Helper()
	id := jupyter.NewID()
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	if err := k.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		t.Fatal(err)
	}
	return id
}

func find(ms []*jupyter.Message, channel, msgType string) *jupyter.Message {
	for _, m := range ms {
		if m.Channel == channel && m.Header.MsgType == msgType {
			return m
		}
	}
	return nil
}

func findStatus(ms []*jupyter.Message, state string) *jupyter.Message {
	for _, m := range ms {
		if m.Header.MsgType == "status" && field(m, "execution_state") == state {
			return m
		}
	}
	return nil
}

// field returns a top-level string field of m's content.
func field(m *jupyter.Message, name string) string {
	var c map[string]any
	if json.Unmarshal(m.Content, &c) != nil {
		return ""
	}
	s, _ := c[name].(string)
	return s
}

// stdout concatenates the stream output on stdout.
func stdout(ms []*jupyter.Message) string { return streamText(ms, "stdout") }

// streamText concatenates the stream messages of one name.
func streamText(ms []*jupyter.Message, name string) string {
	var b strings.Builder
	for _, m := range ms {
		if m.Header.MsgType == "stream" && field(m, "name") == name {
			b.WriteString(field(m, "text"))
		}
	}
	return b.String()
}

func summary(ms []*jupyter.Message) string {
	var parts []string
	for _, m := range ms {
		s := m.Channel + "/" + m.Header.MsgType
		if st := field(m, "execution_state"); st != "" {
			s += ":" + st
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
