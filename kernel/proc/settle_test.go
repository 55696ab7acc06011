package proc

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSettle: a sleeping process is found asleep, a busy loop runs until
// its CPU budget or its wall time, an ended process is gone, and a
// cancelled wait says nothing.
func TestSettle(t *testing.T) {
	ctx := t.Context()
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	if got := Settle(ctx, sleeper.Process.Pid, time.Hour, time.Hour); got != SettledAsleep {
		t.Errorf("a sleeper: %q, want %q", got, SettledAsleep)
	}

	spinner := spin(t)
	began := CPUSeconds(spinner.Process.Pid)
	if got := Settle(ctx, spinner.Process.Pid, 300*time.Millisecond, time.Hour); got != SettledCPU {
		t.Errorf("a busy loop with a CPU budget: %q, want %q", got, SettledCPU)
	}
	if ran := CPUSeconds(spinner.Process.Pid) - began; ran < 0.25 {
		t.Errorf("the busy loop's budget of 0.3 s ended after %.2f s of CPU", ran)
	}
	if got := Settle(ctx, spinner.Process.Pid, time.Hour, 300*time.Millisecond); got != SettledWall {
		t.Errorf("a busy loop with a wall bound: %q, want %q", got, SettledWall)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got := Settle(cctx, spinner.Process.Pid, time.Hour, time.Hour); got != "" {
		t.Errorf("a cancelled wait: %q", got)
	}

	if err := spinner.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = spinner.Wait()
	if got := Settle(ctx, spinner.Process.Pid, time.Hour, time.Hour); got != SettledGone {
		t.Errorf("an ended process: %q, want %q", got, SettledGone)
	}
}

// TestWhenSettled: f runs once a watched process sleeps; a busy loop
// watched beside it is not settled by then (it has not run for
// StartSlotCPU: one thread runs for at most the time that passed), and
// after stop its f never runs.
func TestWhenSettled(t *testing.T) {
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	spinner := spin(t)
	began := time.Now()
	var busyRan atomic.Bool
	stopBusy := WhenSettled(t.Context(), spinner.Process.Pid, func() { busyRan.Store(true) })
	ran := make(chan struct{})
	stop := WhenSettled(t.Context(), sleeper.Process.Pid, func() { close(ran) })
	defer stop()
	select {
	case <-ran:
	case <-time.After(time.Minute):
		t.Fatal("a sleeping process was not found settled in a minute")
	}
	if took := time.Since(began); took < StartSlotCPU {
		stopBusy()
		if busyRan.Load() {
			t.Errorf("a busy loop was found settled %v after its watch began", took)
		}
	} else {
		stopBusy()
		t.Logf("the sleeper took %v to settle, past the busy loop's budget: no check of the busy loop", took)
	}
}

// TestWhenSettledWithoutHook: a start that holds no slot (a nil f) starts
// no watch: stop returns at once, and no goroutine is left.
func TestWhenSettledWithoutHook(t *testing.T) {
	before := runtime.NumGoroutine()
	stop := WhenSettled(t.Context(), os.Getpid(), nil)
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("goroutines: %d with a watch of nothing, %d before", n, before)
	}
	stop()
}

// TestSchedTimesState: schedTimes reads the main thread's state with the
// threads' times, and a process that ended reads as ended or gone.
func TestSchedTimesState(t *testing.T) {
	self, err := schedTimes(os.Getpid())
	if err != nil || self.ended() || self.run <= 0 {
		t.Fatalf("this process: %+v, %v; want it running with some CPU time", self, err)
	}
	c := exec.Command("true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Wait() }()
	// Wait for its exit without reaping it: a zombie now.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, c.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := schedTimes(c.Process.Pid); err == nil && !st.ended() {
		t.Errorf("an exited child not reaped: %+v, want it ended", st)
	}
}
