package isolate

import (
	"bytes"
	"os"
	"strconv"

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
				u.CPUSeconds += ProcCPUSeconds(p)
			}
		}
	}
	return u, true
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux aiod runs on.
const clockTicks = 100

// ProcCPUSeconds is process pid's user and system CPU time so far (0 when
// it cannot be read).
func ProcCPUSeconds(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	// After "pid (comm) ": state is field 3; utime and stime are 14 and 15.
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseUint(string(f[11]), 10, 64)
	stime, _ := strconv.ParseUint(string(f[12]), 10, 64)
	return float64(ut+stime) / clockTicks
}
