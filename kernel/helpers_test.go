package kernel

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

// recorder keeps every message a kernel delivers.
type recorder = kerneltest.Recorder

func newRecorder() *recorder { return kerneltest.NewRecorder() }

// startKernel starts the default Python kernel and closes it at cleanup.
func startKernel(t testing.TB, mod func(*Options)) (*Kernel, *recorder) {
	t.Helper()
	kerneltest.SkipShort(t, "a kernel")
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
	opts := Options{Spec: spec, Handler: rec.Handle, Logger: testLogger(), StartTimeout: startTimeout}
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
	return rec.WaitFor(t, execTimeout, id, "execute_reply and idle", kerneltest.Complete)
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

// stdout joins the text of the stdout stream messages.
func stdout(ms []*jupyter.Message) string { return kerneltest.StreamText(ms, "stdout") }
