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

// settlePeriod is how often Settle samples; the process is asleep once
// two periods in a row were mostly idle.
const settlePeriod = 100 * time.Millisecond

// Settle waits while process pid is busy starting: running on a CPU, or
// waiting in a run queue for one, for more than a quarter of each period
// of settlePeriod. That is what a start slot is held for: a start-up is
// CPU work, and more of them at once only makes each slower, until, past
// the machine's cores, each waits long enough to miss its deadline. It
// returns why it stopped waiting: pid was mostly idle for two periods in
// a row (a start-up that sleeps, such as a tenant's startup file waiting
// on the network, costs no CPU and gives its slot back), it has run for
// cpu in all (a start-up busy far past a kernel's, such as a startup file
// that spins, holds a slot for a bounded time), wall has passed since the
// call, or pid is gone. It returns "" when ctx ends first.
func Settle(ctx context.Context, pid int, cpu, wall time.Duration) string {
	run0, wait0, err := schedTimes(pid)
	if err != nil {
		return SettledGone
	}
	tick := time.NewTicker(settlePeriod)
	defer tick.Stop()
	deadline := time.NewTimer(wall)
	defer deadline.Stop()
	last, idle := run0+wait0, 0
	prev := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-deadline.C:
			return SettledWall
		case now := <-tick.C:
			run, wait, err := schedTimes(pid)
			if err != nil || !alive(pid) {
				return SettledGone
			}
			if run-run0 >= cpu {
				return SettledCPU
			}
			// A thread that ended takes its times with it: a sum that
			// went down counts as a busy period.
			busy := run + wait - last
			if busy >= 0 && 4*busy < now.Sub(prev) {
				idle++
			} else {
				idle = 0
			}
			if idle >= 2 {
				return SettledAsleep
			}
			last, prev = run+wait, now
		}
	}
}

// alive says whether pid is a process that can still run: not a zombie or
// dead.
func alive(pid int) bool {
	f, err := StatFields(pid)
	return err == nil && len(f) > 0 && f[0] != "" && f[0][0] != 'Z' && f[0][0] != 'X' && f[0][0] != 'x'
}
