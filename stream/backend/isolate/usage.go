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
	u := Usage{MemoryBytes: int64(st.MemoryStats.Usage.Usage), MemoryPeakBytes: int64(st.MemoryStats.Usage.MaxUsage),
		Pids: int64(st.PidsStats.Current), PidsLimit: int64(st.PidsStats.Limit)}
	if lim := st.MemoryStats.Usage.Limit; lim > 0 && lim < 1<<62 {
		u.MemoryLimitBytes = int64(lim)
	}
	if u.PidsLimit >= 1<<62 {
		u.PidsLimit = 0
	}
	if l.dir != "" {
		if pids, err := cgroups.GetAllPids(l.dir); err == nil {
			for _, p := range pids {
				u.CPUSeconds += proc.CPUSeconds(p)
			}
		}
	}
	return u, true
}
