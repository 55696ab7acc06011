package proc

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPins: starts are spread over the CPUs, the least held first; Unpin
// gives all CPUs back to a process pinned to the CPU it was given, and
// leaves alone one that placed itself elsewhere since.
func TestPins(t *testing.T) {
	p := NewPins()
	if p == nil {
		t.Skip("one CPU: nothing to pin to")
	}
	a, b := p.Take(), p.Take()
	if a == b {
		t.Errorf("two starts on CPU %d of %v", a, p.cpus)
	}
	p.Give(a)
	if c := p.Take(); c != a {
		t.Errorf("took CPU %d, want %d, the one given back", c, a)
	}
	p.Give(a)
	p.Give(b)

	pinned := func(cpu int) *exec.Cmd {
		t.Helper()
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(c.Process.Pid, &one); err != nil {
			t.Fatal(err)
		}
		return c
	}
	mine, moved := pinned(a), pinned(b)
	if err := p.Unpin(mine.Process.Pid, a); err != nil {
		t.Fatal(err)
	}
	if err := p.Unpin(moved.Process.Pid, a); err != nil {
		t.Fatal(err)
	}
	var got unix.CPUSet
	if err := unix.SchedGetaffinity(mine.Process.Pid, &got); err != nil || got != p.all {
		t.Errorf("unpinned: CPUs %d (%v), want all %d", got.Count(), err, p.all.Count())
	}
	if err := unix.SchedGetaffinity(moved.Process.Pid, &got); err != nil || got.Count() != 1 || !got.IsSet(b) {
		t.Errorf("a process on CPU %d was changed by the unpin of CPU %d: %d CPUs (%v)", b, a, got.Count(), err)
	}
	if err := p.Unpin(1<<22, a); err != nil {
		t.Errorf("unpin of a process that is gone: %v", err)
	}
}
