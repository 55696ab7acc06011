package proc

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPins: starts are spread over the CPUs, the least held first; Unpin
// gives all CPUs back to a process pinned to the CPU it was given, and
// leaves alone one that placed itself elsewhere since. The spreading is
// checked on a set of two CPUs, the unpinning on this machine's own.
func TestPins(t *testing.T) {
	var two unix.CPUSet
	two.Set(0)
	two.Set(1)
	p := newPins(two)
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
	var one unix.CPUSet
	one.Set(0)
	if q := newPins(one); q != nil || q.Take() != -1 {
		t.Errorf("one CPU: Pins %v, want none and no CPU to take", q)
	}

	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	first := -1
	for c := range len(mine) * 64 {
		if mine.IsSet(c) {
			first = c
			break
		}
	}
	own := &Pins{all: mine}
	pinned := func() *exec.Cmd {
		t.Helper()
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		var one unix.CPUSet
		one.Set(first)
		if err := unix.SchedSetaffinity(c.Process.Pid, &one); err != nil {
			t.Fatal(err)
		}
		return c
	}
	given, moved := pinned(), pinned()
	if err := own.Unpin(given.Process.Pid, first); err != nil {
		t.Fatal(err)
	}
	// Pinned to first, not to the CPU its start-up was given.
	if err := own.Unpin(moved.Process.Pid, first+1); err != nil {
		t.Fatal(err)
	}
	var got unix.CPUSet
	if err := unix.SchedGetaffinity(given.Process.Pid, &got); err != nil || got != mine {
		t.Errorf("unpinned: CPUs %d (%v), want all %d", got.Count(), err, mine.Count())
	}
	if err := unix.SchedGetaffinity(moved.Process.Pid, &got); err != nil || got.Count() != 1 || !got.IsSet(first) {
		t.Errorf("a process on CPU %d was changed by the unpin of CPU %d: %d CPUs (%v)", first, first+1, got.Count(), err)
	}
	if err := own.Unpin(1<<22, first); err != nil {
		t.Errorf("unpin of a process that is gone: %v", err)
	}
}
