package backend

import (
	"os"
	"strconv"
	"strings"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/proc"
	"github.com/aiod/aiod/stream/backend/isolate"
)

// RuntimeUsage is what a session's runtime uses now. Source says where it
// was read: "cgroup" (the runtime's own group: every process it started,
// with its limits), or "proc" (its main process alone, when no group
// holds it: no limits set, rlimits only, or a remote kernel's local side
// has none). Limits of 0 are none.
type RuntimeUsage struct {
	Source           string  `json:"source"`
	PID              int     `json:"pid"`
	MemoryBytes      int64   `json:"memory_bytes"`
	MemoryPeakBytes  int64   `json:"memory_peak_bytes"`
	MemoryLimitBytes int64   `json:"memory_limit_bytes"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	Pids             int64   `json:"pids"`
	PidsLimit        int64   `json:"pids_limit"`
}

// UsageOf reads rt's usage; false when there is nothing to read (no
// local process).
func UsageOf(rt jupyter.Runtime) (RuntimeUsage, bool) {
	if rt == nil {
		return RuntimeUsage{}, false
	}
	pid := rt.Info().PID
	if w, ok := rt.(interface{ limits() *isolate.Limits }); ok {
		if u, ok := w.limits().Usage(); ok {
			return RuntimeUsage{Source: "cgroup", PID: pid, MemoryBytes: u.MemoryBytes, MemoryPeakBytes: u.MemoryPeakBytes,
				MemoryLimitBytes: u.MemoryLimitBytes, CPUSeconds: u.CPUSeconds, Pids: u.Pids, PidsLimit: u.PidsLimit}, true
		}
	}
	if pid <= 0 {
		return RuntimeUsage{}, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return RuntimeUsage{}, false
	}
	u := RuntimeUsage{Source: "proc", PID: pid, CPUSeconds: proc.CPUSeconds(pid), Pids: 1}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			u.MemoryBytes = n << 10
		case "VmHWM":
			u.MemoryPeakBytes = n << 10
		}
	}
	return u, true
}

// limits is the runtime's limits, for UsageOf.
func (w *limited) limits() *isolate.Limits { return w.l }
