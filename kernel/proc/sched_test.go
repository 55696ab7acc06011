package proc

import (
	"os/exec"
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
	waitState(t, sleeper.Process.Pid, 'S')
	var q Starvation
	q.Mark(sleeper.Process.Pid, time.Now())
	if !q.Marked() {
		t.Fatal("no sample of a sleeping process")
	}
	if q.Starved(sleeper.Process.Pid, time.Now()) {
		t.Error("a sleeping process was found starved")
	}
	q.Reset()
	if q.Marked() || q.Starved(sleeper.Process.Pid, time.Now()) {
		t.Error("Reset kept the sample")
	}
}

// waitState waits until pid's state letter is want.
func waitState(t *testing.T, pid int, want byte) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, runnable, err := runDelay(pid); err == nil && (want == 'T') == !runnable {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not in state %c after 30 s", pid, want)
		}
	}
}
