package stream

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/aiod/aiod/kernel/jupyter"
)

func TestLabelsRoundTrip(t *testing.T) {
	l := Labels("/v2/code/sessions/{id}", "DELETE", "200")
	if got := SplitLabels(l, 3); fmt.Sprint(got) != "[/v2/code/sessions/{id} DELETE 200]" {
		t.Fatalf("SplitLabels(%q) = %q", l, got)
	}
	if got := SplitLabels("python", 2); fmt.Sprint(got) != "[python ]" {
		t.Fatalf("a short label is padded: %q", got)
	}
	if got := SplitLabels("", 1); len(got) != 1 || got[0] != "" {
		t.Fatalf("no label: %q", got)
	}
	for name, f := range Families {
		if f.Help == "" {
			t.Errorf("family %s has no help", name)
		}
	}
}

func TestDeathCause(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&jupyter.DeadError{Runtime: "kernel", Cause: "killed by signal SIGKILL", ExitCode: -1, Signal: "SIGKILL"}, "SIGKILL"},
		{fmt.Errorf("wrapped: %w", &jupyter.DeadError{Signal: "SIGSEGV", ExitCode: -1}), "SIGSEGV"},
		{&jupyter.DeadError{Signal: "signal 34", ExitCode: -1}, "signal"},
		{&jupyter.DeadError{Cause: "exited with code 1", ExitCode: 1}, "exit"},
		{&jupyter.DeadError{Cause: "stopped answering heartbeats for 5s", ExitCode: -1}, "heartbeat"},
		{&jupyter.DeadError{Cause: "websocket lost", ExitCode: -1}, "other"},
		{errors.New("not a death"), "other"},
	} {
		if got := DeathCause(c.err); got != c.want {
			t.Errorf("DeathCause(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

type obsRecorder struct {
	mu  sync.Mutex
	got []string
}

func (r *obsRecorder) Observe(name, label string, v float64) {
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf("%s %s %g", name, label, v))
	r.mu.Unlock()
}

func TestCountersCellsAndObserver(t *testing.T) {
	c := NewCounters()
	c.Observe(ExecutionSeconds, "x", 1) // no observer yet: dropped
	r := &obsRecorder{}
	c.SetObserver(r)
	c.Observe(ExecutionSeconds, Labels("python", "kernel"), 0.5)
	if len(r.got) != 1 || r.got[0] != "execution_duration_seconds python|kernel 0.5" {
		t.Fatalf("observed %q", r.got)
	}
	cell := c.Cell(OutputBytes, "python")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				cell.Add(2)
				c.Count(OutputBytes, "python", 1)
			}
		}()
	}
	wg.Wait()
	if got := c.Get(OutputBytes, "python"); got != 24000 {
		t.Fatalf("cell and Count share one counter: %d, want 24000", got)
	}
}
