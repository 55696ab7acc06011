package proc

import (
	"context"
	"time"
)

// Why Settle returned.
const (
	SettledAsleep = "asleep" // the process sleeps: its start-up waits on something, not on a CPU
	SettledCPU    = "cpu"    // it has run for its CPU budget
	SettledWall   = "wall"   // it has been watched for the longest a slot is held
	SettledGone   = "gone"   // it ended, or its threads cannot be read
)

// How long a runtime's start-up keeps its start slot, at most (see
// WhenSettled).
const (
	StartSlotCPU  = 2 * time.Second  // of its CPU time: a forked pandas kernel takes about 0.2 s, a spawned one about 1 (0.98 s measured on a loaded 2-core machine)
	StartSlotWall = 15 * time.Second // from its launch
)

// WhenSettled watches the start-up of the runtime process pid and runs f
// once Settle(ctx, pid, StartSlotCPU, StartSlotWall) has returned (not when
// ctx ended first): a runtime start calls it with the start's
// jupyter.LaunchedHook, so that the start slot the caller holds is kept
// through the start-up while that keeps a CPU busy. A nil f (a start that
// holds no slot) starts no watch. stop ends the watch and waits for it;
// after stop, f has run or never will.
func WhenSettled(ctx context.Context, pid int, f func()) (stop func()) {
	if f == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if Settle(ctx, pid, StartSlotCPU, StartSlotWall) != "" {
			f()
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// settlePeriod is how often Settle samples; the process is asleep once
// two periods in a row were mostly idle.
const settlePeriod = 100 * time.Millisecond

// Settle waits while process pid is busy starting: running on a CPU or
// waiting in a run queue for one for more than a quarter of each period of
// settlePeriod, or with a thread runnable at the period's end. That is
// what a start slot is held for: a start-up is CPU work, and more of them
// at once only makes each slower, until, past the machine's cores, each
// waits long enough to miss its deadline. It returns why it stopped
// waiting: pid was mostly idle for two periods in a row (a start-up that
// sleeps, such as a tenant's startup file waiting on the network, costs
// no CPU and gives its slot back), it has run for cpu in all (a start-up
// busy far past a kernel's, such as a startup file that spins, holds a
// slot for a bounded time), wall has passed since the call, or pid is
// gone. It returns "" when ctx ends first.
func Settle(ctx context.Context, pid int, cpu, wall time.Duration) string {
	t0, err := schedTimes(pid)
	if err != nil {
		return SettledGone
	}
	tick := time.NewTicker(settlePeriod)
	defer tick.Stop()
	deadline := time.NewTimer(wall)
	defer deadline.Stop()
	last, idle := t0.run+t0.wait, 0
	prev := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-deadline.C:
			return SettledWall
		case now := <-tick.C:
			t, err := schedTimes(pid)
			if err != nil || t.ended() {
				return SettledGone
			}
			if t.run-t0.run >= cpu {
				return SettledCPU
			}
			// A thread that ended takes its times with it: a sum that
			// went down counts as a busy period. So does one that is
			// runnable now: its wait is counted only once it runs.
			busy := t.run + t.wait - last
			if !t.active && busy >= 0 && 4*busy < now.Sub(prev) {
				idle++
			} else {
				idle = 0
			}
			if idle >= 2 {
				return SettledAsleep
			}
			last, prev = t.run+t.wait, now
		}
	}
}
