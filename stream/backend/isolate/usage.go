package isolate

import (
	"github.com/aiod/aiod/kernel/proc"
	"github.com/opencontainers/cgroups"
)

// Usage is what one runtime uses now, from its cgroup: memory (now, at
// its peak, its limit), processes and threads (and their limit), and the
// CPU time of the processes in it now (utime+stime from /proc, since
// cgroup v1's cpuacct is not among aiod's controllers). Limits of 0 are
// none.
type Usage struct {
	MemoryBytes, MemoryPeakBytes, MemoryLimitBytes int64
	Pids, PidsLimit                                int64
	CPUSeconds                                     float64
}

// Usage reads the runtime's group; false with rlimits or no group.
func (l *Limits) Usage() (Usage, bool) {
	if l == nil || l.mgr == nil {
		return Usage{}, false
	}
	st, err := l.mgr.GetStats()
	if err != nil {
		return Usage{}, false
	}
	var u Usage
	u.MemoryBytes, u.MemoryPeakBytes, u.MemoryLimitBytes, u.Pids, u.PidsLimit = memPidsOf(st)
	if l.dir != "" {
		if pids, err := cgroups.GetAllPids(l.dir); err == nil {
			for _, p := range pids {
				u.CPUSeconds += proc.CPUSeconds(p)
			}
		}
	}
	return u, true
}

// memPidsOf is a group's memory now, at its peak and its limit, and its
// processes and threads and their limit, from its stats; a limit the
// group does not have (the kernel's "unlimited", a huge number) is 0.
func memPidsOf(st *cgroups.Stats) (mem, peak, limit, pids, pidsLimit int64) {
	mem, peak, pids = int64(st.MemoryStats.Usage.Usage), int64(st.MemoryStats.Usage.MaxUsage), int64(st.PidsStats.Current)
	if lim := st.MemoryStats.Usage.Limit; lim > 0 && lim < 1<<62 {
		limit = int64(lim)
	}
	if lim := st.PidsStats.Limit; lim < 1<<62 {
		pidsLimit = int64(lim)
	}
	return mem, peak, limit, pids, pidsLimit
}
