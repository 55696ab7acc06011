package stream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
)

func kernelBackend(t testing.TB) Backend {
	t.Helper()
	spec, err := kernel.DefaultPythonSpec()
	if err != nil {
		t.Fatalf("no python kernelspec (install python3-ipykernel): %v", err)
	}
	return Backend{Name: "kernel", Language: "python", Idle: time.Minute,
		Start: func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
			return kernel.Start(ctx, kernel.Options{Spec: spec, Handler: h, StartTimeout: 2 * time.Minute})
		}}
}

func newTestRegistry(t testing.TB) *Registry {
	r := NewRegistry(Config{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("close registry: %v", err)
		}
	})
	return r
}

func drain(t testing.TB, q *recorder, execID string) []string {
	t.Helper()
	var seen []string
	for {
		e, ok := q.next(30 * time.Second)
		if !ok {
			t.Fatalf("recorder: nothing within 30 s (seen %v)", seen)
		}
		if e.ExecID != execID {
			continue
		}
		if e.Result != nil {
			return seen
		}
		seen = append(seen, e.Msg.Channel+"/"+e.Msg.Header.MsgType)
	}
}

// A second subscriber on the execution and a session watcher see the same
// messages, in the same order, as the collector that builds the answer.
func TestSecondSubscriberSeesSameMessages(t *testing.T) {
	reg := newTestRegistry(t)
	sess, _, err := reg.Open("", "python", "two", kernelBackend(t))
	if err != nil {
		t.Fatal(err)
	}
	perExec := newRecorder()
	watcher := newRecorder()
	sess.Mux().Watch(watcher)
	defer sess.Mux().Unwatch(watcher)
	res, err := sess.Execute(context.Background(), ExecRequest{
		Code: "print('a', flush=True)\nimport sys; print('b', file=sys.stderr, flush=True)\n1/0", Timeout: time.Minute,
		Subs: []execution.Subscriber{perExec},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != execution.StatusError || res.Text("stdout") != "a\n" || res.Text("stderr") != "b\n" {
		t.Fatalf("result %+v", res)
	}
	a, b := drain(t, perExec, res.ID), drain(t, watcher, res.ID)
	if strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatalf("subscribers disagree:\n%v\n%v", a, b)
	}
	joined := strings.Join(a, ",")
	for _, want := range []string{"iopub/status", "iopub/stream", "iopub/error", "shell/execute_reply"} {
		if !strings.Contains(joined, want) {
			t.Fatalf("subscriber missed %s: %v", want, a)
		}
	}
}

// Calls on one session run in arrival order, and a queued call's timeout
// counts from its arrival.
func TestSessionQueueIsFIFOWithArrivalTimeouts(t *testing.T) {
	reg := newTestRegistry(t)
	sess, _, _ := reg.Open("", "python", "fifo", kernelBackend(t))
	if _, err := sess.Execute(context.Background(), ExecRequest{Code: "order = []", Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	results := make(chan *execution.Result, 4)
	for i := 0; i < 3; i++ {
		go func() {
			r, _ := sess.Execute(context.Background(), ExecRequest{Code: fmt.Sprintf("import time; time.sleep(0.3); order.append(%d)", i), Timeout: time.Minute})
			results <- r
		}()
		waitFor(t, func() bool { // arrived: running or queued, in this order
			sess.mu.Lock()
			defer sess.mu.Unlock()
			return sess.pending == i+1
		})
	}
	go func() { // arrives behind ~0.9 s of work with a 0.2 s timeout
		r, _ := sess.Execute(context.Background(), ExecRequest{Code: "order.append('late')", Timeout: 200 * time.Millisecond})
		results <- r
	}()
	var late *execution.Result
	for i := 0; i < 4; i++ {
		if r := <-results; r.Code == "order.append('late')" {
			late = r
		}
	}
	if late.Status != execution.StatusTimeout || !strings.Contains(late.Message(), "did not run") {
		t.Fatalf("late call: %s %q", late.Status, late.Message())
	}
	r, _ := sess.Execute(context.Background(), ExecRequest{Code: "print(order)", Timeout: time.Minute})
	if r.Text("stdout") != "[0, 1, 2]\n" {
		t.Fatalf("order = %q", r.Text("stdout"))
	}
}
