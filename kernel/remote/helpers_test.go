package remote

import (
	"context"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// Generous: the test machine has two busy cores.
const (
	startTimeout = 90 * time.Second
	execTimeout  = 60 * time.Second
)

// execute runs code and waits for its reply and idle status.
func execute(t testing.TB, k *Kernel, rec *recorder, code string) []*jupyter.Message {
	t.Helper()
	id := send(t, k, code)
	return rec.WaitFor(t, execTimeout, id, "execute_reply and idle", kerneltest.Complete)
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

// recorder keeps every message a kernel delivers.
type recorder = kerneltest.Recorder

func newRecorder() *recorder { return kerneltest.NewRecorder() }

// startKernel starts a kernel on s and closes it at cleanup.
func startKernel(t testing.TB, s *jupyterServer, mod func(*Options)) (*Kernel, *recorder) {
	t.Helper()
	kerneltest.SkipShort(t, "a kernel on Jupyter Server")
	rec := newRecorder()
	opts := Options{
		Client:       client(t, s),
		KernelName:   "python3",
		Handler:      rec.Handle,
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

// stdout joins the text of the stdout stream messages.
func stdout(ms []*jupyter.Message) string { return kerneltest.StreamText(ms, "stdout") }
