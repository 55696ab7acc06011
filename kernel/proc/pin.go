package proc

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Pins hands out one CPU to each forked kernel's start-up, so that all the
// threads of a starting kernel run on one CPU until the start-up is over.
//
// Why: a forked kernel writes to thousands of pages it shares with its
// template, and each write makes the kernel copy the page and flush the
// old translation from the TLB of every other CPU that runs a thread of
// the process at the time, by an interrupt it waits for. A starting
// kernel's threads (its zmq I/O threads, the I/O publisher, the
// heartbeat) run on every CPU they can. On a virtual machine that
// interrupt goes through the host: on the 2-core VM of bench/README.md
// those flushes were 18 % of a forked kernel's start-up CPU time, and
// none are left when its threads share one CPU.
//
// Each start takes the CPU the fewest start-ups hold now, so a burst of
// starts still spreads over the machine. Unpin gives the kernel back the
// CPUs it may run on.
type Pins struct {
	all   unix.CPUSet // what Unpin restores: aiod's own set when made
	mu    sync.Mutex
	cpus  []int // the CPUs of all
	count []int // start-ups pinned to each of cpus now; guarded by mu
	next  int   // where the search for the least held CPU starts; guarded by mu
}

// NewPins returns the Pins of the CPUs aiod may run on, or nil when there
// is only one (or they cannot be read): nothing to choose between.
func NewPins() *Pins {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil
	}
	return newPins(all)
}

// newPins returns the Pins of the CPUs in all, or nil for fewer than two.
func newPins(all unix.CPUSet) *Pins {
	var cpus []int
	for c := range len(all) * 64 {
		if all.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		return nil
	}
	return &Pins{all: all, cpus: cpus, count: make([]int, len(cpus))}
}

// Take returns the CPU for a new start-up: the one the fewest start-ups
// hold, the first such after the last one taken; -1 from nil Pins. Give it
// back with Give.
func (p *Pins) Take() int {
	if p == nil {
		return -1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	for i := range p.cpus {
		j := (p.next + i) % len(p.cpus)
		if best < 0 || p.count[j] < p.count[best] {
			best = j
		}
	}
	p.count[best]++
	p.next = (best + 1) % len(p.cpus)
	return p.cpus[best]
}

// Give returns cpu, taken with Take (-1: none).
func (p *Pins) Give(cpu int) {
	if p == nil || cpu < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.cpus {
		if c == cpu && p.count[i] > 0 {
			p.count[i]--
			return
		}
	}
}

// UnpinWhenSettled waits until the start-up of process pid is over
// (Settle, with StartSlotCPU and StartSlotWall), then unpins it from cpu;
// either way it gives cpu back. It returns nil when ctx ended first.
func (p *Pins) UnpinWhenSettled(ctx context.Context, pid, cpu int) error {
	defer p.Give(cpu)
	if Settle(ctx, pid, StartSlotCPU, StartSlotWall) == "" {
		return nil
	}
	return p.Unpin(pid, cpu)
}

// Unpin lets every thread of process pid that is still pinned to cpu (by
// its start-up, not by its own code since) run on all of aiod's CPUs
// again. A thread takes its CPUs from the thread that makes it, so Unpin
// goes over the threads again while new ones show up (one made by a thread
// not yet unpinned), up to a few rounds. A process or thread that is gone
// is no error.
func (p *Pins) Unpin(pid, cpu int) error {
	var one unix.CPUSet
	one.Set(cpu)
	seen := map[string]bool{}
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	for range 4 {
		tasks, _ := filepath.Glob(dir + "*")
		fresh := false
		for _, task := range tasks {
			if seen[task] {
				continue
			}
			seen[task], fresh = true, true
			tid, err := strconv.Atoi(filepath.Base(task))
			if err != nil {
				continue
			}
			var cur unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &cur); err != nil || cur != one {
				continue // gone, or placed by the runtime itself
			}
			if err := unix.SchedSetaffinity(tid, &p.all); err != nil && err != unix.ESRCH {
				return os.NewSyscallError("sched_setaffinity", err)
			}
		}
		if !fresh {
			return nil
		}
	}
	return nil
}
