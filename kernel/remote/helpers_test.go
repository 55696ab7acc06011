package remote

import (
	"context"
	"fmt"
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

// recorder is a Handler that keeps every message and wakes waiters.
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

func (r *recorder) all() []*jupyter.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*jupyter.Message(nil), r.msgs...)
}

// children returns the messages parented to msgID, in arrival order.
func (r *recorder) children(msgID string) []*jupyter.Message {
	var out []*jupyter.Message
	for _, m := range r.all() {
		if m.Parent.MsgID == msgID {
			out = append(out, m)
		}
	}
	return out
}

// waitFor waits until cond holds for the children of msgID.
func (r *recorder) waitFor(t testing.TB, msgID, what string, cond func([]*jupyter.Message) bool) []*jupyter.Message {
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

// execute runs code and waits for its reply and idle status.
func execute(t testing.TB, k *Kernel, rec *recorder, code string) []*jupyter.Message {
	t.Helper()
	id := send(t, k, code)
	return rec.waitFor(t, id, "execute_reply and idle", complete)
}

// send sends an execute_request for code and returns its msg_id.
func send(t testing.TB, k *Kernel, code string) string {
	t.Helper()
	id := jupyter.NewID()
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	if err := k.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		t.Fatalf("execute %q: %v", code, err)
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
		if m.Channel == "iopub" && m.Header.MsgType == "status" && field(m, "execution_state") == state {
			return m
		}
	}
	return nil
}

// field returns a string field of m's content.
func field(m *jupyter.Message, name string) string {
	var c map[string]any
	if json.Unmarshal(m.Content, &c) != nil {
		return ""
	}
	s, _ := c[name].(string)
	return s
}

// stdout joins the text of the stdout stream messages.
func stdout(ms []*jupyter.Message) string {
	var b strings.Builder
	for _, m := range ms {
		if m.Header.MsgType == "stream" && field(m, "name") == "stdout" {
			b.WriteString(field(m, "text"))
		}
	}
	return b.String()
}

func summary(ms []*jupyter.Message) string {
	var parts []string
	for _, m := range ms {
		s := m.Channel + "/" + m.Header.MsgType
		switch m.Header.MsgType {
		case "status":
			s += "(" + field(m, "execution_state") + ")"
		case "stream":
			s += fmt.Sprintf("(%q)", field(m, "text"))
		case "error":
			s += "(" + field(m, "ename") + ")"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// startKernel starts a kernel on s and closes it at cleanup.
func startKernel(t testing.TB, s *jupyterServer, mod func(*Options)) (*Kernel, *recorder) {
	t.Helper()
	rec := newRecorder()
	opts := Options{
		Client:       client(t, s),
		KernelName:   "python3",
		Handler:      rec.handle,
		Env:          map[string]string{"KERNEL_USERNAME": "aiod-test"},
		StartTimeout: startTimeout,
		Logger:       testLogger(),
	}
	if mod != nil {
		mod(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	k, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k.Close(ctx)
	})
	return k, rec
}

// waitDone waits for the kernel to end by itself.
func waitDone(t testing.TB, k *Kernel, within time.Duration) error {
	t.Helper()
	select {
	case <-k.Done():
		return k.Err()
	case <-time.After(within):
		t.Fatalf("kernel still running %s later", within)
		return nil
	}
}
