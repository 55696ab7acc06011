package gateway

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
)

// stubRuntime is a jupyter.Runtime (and Sender) that answers nothing by
// itself: for the few route tests that need a runtime to do on demand what
// a real one will not (hang in an interrupt, die at a chosen moment). The
// routes' own tests run real kernels.
type stubRuntime struct {
	hold chan struct{}         // when not nil, Interrupt waits until it is closed (or ctx ends)
	sent chan *jupyter.Message // when not nil, Send hands it what it was sent

	mu   sync.Mutex
	err  error
	done chan struct{}
}

var errStubClosed = errors.New("stub: closed")

func newStubRuntime() *stubRuntime { return &stubRuntime{done: make(chan struct{})} }

func (r *stubRuntime) Execute(context.Context, jupyter.ExecuteRequest) error { return nil }
func (r *stubRuntime) Send(_ context.Context, m *jupyter.Message) error {
	if r.sent != nil {
		r.sent <- m
	}
	return nil
}

func (r *stubRuntime) Interrupt(ctx context.Context) error {
	if r.hold == nil {
		return nil
	}
	select {
	case <-r.hold:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// die ends the runtime as a crash would.
func (r *stubRuntime) die() {
	r.end(&jupyter.DeadError{Runtime: "kernel", Cause: "stub died", ExitCode: -1})
}

func (r *stubRuntime) end(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
		close(r.done)
	}
}

func (r *stubRuntime) Close(context.Context) error { r.end(errStubClosed); return nil }
func (r *stubRuntime) Done() <-chan struct{}       { return r.done }

func (r *stubRuntime) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *stubRuntime) Info() jupyter.RuntimeInfo {
	return jupyter.RuntimeInfo{Backend: backend.Kernel, Language: "python", Name: "stub"}
}

// stubSession opens the default tenant's Python kernel session id, whose
// every runtime is made by newRT and also sent on the returned channel
// (buffered: a test that does not read it is not held up).
func stubSession(t testing.TB, ts *testServer, id string, newRT func() *stubRuntime) (*stream.Session, <-chan *stubRuntime) {
	t.Helper()
	started := make(chan *stubRuntime, 16)
	b := stream.Backend{Name: backend.Kernel, Language: "python", Spec: "stub",
		Start: func(context.Context, jupyter.Handler) (jupyter.Runtime, error) {
			r := newRT()
			select {
			case started <- r:
			default:
			}
			return r, nil
		}}
	sess, _, err := ts.Registry().Open("default", "python", id, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.EnsureRuntime(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Deleted before the server's shutdown (cleanups run last first): a
	// stub answers no execute, and shutdown would try to save it.
	t.Cleanup(func() { ts.Registry().DeleteSession(context.Background(), sess) })
	return sess, started
}
