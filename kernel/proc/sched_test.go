package proc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// spin starts a shell busy loop on CPU 0 only and stops it at the end.
func spin(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var one unix.CPUSet
	one.Set(0)
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &one); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestStarvation: a busy loop that shares one CPU with three others waits
// for it most of the time and is starved; a sleeping process and a
// stopped one are not, however long they leave a ping unanswered.
func TestStarvation(t *testing.T) {
	target := spin(t)
	for range 3 {
		spin(t)
	}
	var s Starvation
	s.Mark(target.Process.Pid, time.Now())
	for deadline := time.Now().Add(time.Minute); !s.Starved(target.Process.Pid, time.Now()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a busy loop sharing one CPU with three others was not found starved in a minute")
		}
	}
	if err := syscall.Kill(target.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, target.Process.Pid, 'T')
	if s.Starved(target.Process.Pid, time.Now()) {
		t.Error("a stopped process was found starved")
	}

	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	waitSleeping(t, sleeper.Process.Pid, "sleep")
	var q Starvation
	q.Mark(sleeper.Process.Pid, time.Now())
	if !q.Marked() {
		t.Fatal("no sample of a sleeping process")
	}
	// Its wait is judged over a real span: the ping it left unanswered.
	time.Sleep(50 * time.Millisecond)
	if q.Starved(sleeper.Process.Pid, time.Now()) {
		t.Error("a sleeping process was found starved")
	}
	q.Reset()
	if q.Marked() || q.Starved(sleeper.Process.Pid, time.Now()) {
		t.Error("Reset kept the sample")
	}
}

// waitSleeping waits until pid runs command comm (its exec is done) and
// sleeps in nanosleep (state S, in system call 230 or 35): a process just
// started may still stand in the run queue on a loaded machine, and that
// wait is a real one. State S alone is not enough: a loaded machine can
// leave the new process asleep on a page or a lock during its start, after
// which it stands in the run queue again.
func waitSleeping(t *testing.T, pid int, comm string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		sc, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/syscall")
		nr, _, _ := strings.Cut(string(sc), " ")
		f, err := StatFields(pid)
		if err == nil && len(f) > 0 && f[0] == "S" && strings.TrimSpace(string(b)) == comm && (nr == "230" || nr == "35") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not sleeping in %s after 30 s", pid, comm)
		}
	}
}

// waitState waits until pid's state letter is want.
func waitState(t *testing.T, pid int, want byte) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, runnable, _, err := runDelay(pid); err == nil && (want == 'T') == !runnable {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not in state %c after 30 s", pid, want)
		}
	}
}

// TestWithStarvedTimeout: a wait on a sleeping process ends at its timeout
// with its cause; on a process that shares one CPU with three busy loops,
// it goes on to its limit.
func TestWithStarvedTimeout(t *testing.T) {
	cause := errors.New("not ready within the timeout")
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	ctx, cancel := WithStarvedTimeout(context.Background(), sleeper.Process.Pid, 50*time.Millisecond, time.Minute, cause)
	<-ctx.Done()
	cancel()
	if !errors.Is(context.Cause(ctx), cause) {
		t.Errorf("a sleeping process's wait ended with %v", context.Cause(ctx))
	}

	target := spin(t)
	for range 3 {
		spin(t)
	}
	const limit = 2 * time.Second
	began := time.Now()
	ctx, cancel = WithStarvedTimeout(context.Background(), target.Process.Pid, 200*time.Millisecond, limit, cause)
	defer cancel()
	<-ctx.Done()
	if took := time.Since(began); took < limit || !errors.Is(context.Cause(ctx), cause) {
		t.Errorf("a starved process's wait ended after %s (%v), want its limit %s", took, context.Cause(ctx), limit)
	}
	// cancel after the end, and twice, is harmless.
	cancel()
}

// TestWithQuietTimeout: a wait on a process that is heard from goes on past
// its timeout, and ends with its cause a timeout after it fell silent. The
// process talks at the wait's first checks, not for a span of wall time: a
// loaded machine spaces the checks out (one at 275 ms, the next past 400).
func TestWithQuietTimeout(t *testing.T) {
	cause := errors.New("silent")
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	const timeout, talks = 50 * time.Millisecond, 6
	began := time.Now()
	var mu sync.Mutex
	last, calls := began, 0
	heard := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls <= talks {
			last = time.Now()
		}
		return last
	}
	ctx, cancel := WithQuietTimeout(context.Background(), sleeper.Process.Pid, timeout, time.Minute, cause, heard)
	defer cancel()
	<-ctx.Done()
	ended := time.Now()
	mu.Lock()
	silentAt, n := last, calls
	mu.Unlock()
	if !errors.Is(context.Cause(ctx), cause) {
		t.Fatalf("the wait ended with %v", context.Cause(ctx))
	}
	if n <= talks || ended.Sub(silentAt) < timeout || silentAt.Sub(began) < talks*timeout {
		t.Errorf("the wait ended %s after the last word, which came %s after the call, at check %d of %d; want the %d words heard, each a timeout (%s) apart at least, and one more timeout after the last",
			ended.Sub(silentAt), silentAt.Sub(began), min(n, talks), n, talks, timeout)
	}
}

// TestStarvedRule: a process is starved when its threads waited for a CPU
// a quarter of the span, or when one of them waits now while the machine
// was under pressure a quarter of it; a sleeping one never is by the
// machine's pressure alone.
func TestStarvedRule(t *testing.T) {
	const span = 4 * time.Second
	for _, c := range []struct {
		waited, pressure time.Duration
		waiting, want    bool
	}{
		{waited: time.Second, want: true},
		{waited: 999 * time.Millisecond},
		{pressure: time.Second, waiting: true, want: true},
		{pressure: 999 * time.Millisecond, waiting: true},
		{pressure: span},
		{waited: time.Second, waiting: true, want: true},
	} {
		if got := starved(span, c.waited, c.pressure, c.waiting); got != c.want {
			t.Errorf("starved(%v, waited %v, pressure %v, waiting %v) = %v, want %v", span, c.waited, c.pressure, c.waiting, got, c.want)
		}
	}
	if starved(0, time.Second, time.Second, true) {
		t.Error("an empty span was found starved")
	}
	if machinePressure() == 0 {
		t.Error("no PSI totals read from /proc/pressure (this machine's kernel has them)")
	}
}
