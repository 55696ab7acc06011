package backend

import (
	"path/filepath"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/proc"
	"github.com/aiod/aiod/stream/backend/isolate"
	"github.com/aiod/aiod/stream/backend/sandbox"
)

// SandboxReading is what one caller's sandbox uses now, for observation
// (/v1/sandbox/observe). Under tenant isolation it is the tenant's: its
// group's counters and every process of its uid, and its folders; else
// it is the caller's sessions' runtimes: their groups' counters summed
// and the processes under them, and the working folder. Scope names
// which: "tenant" or "sessions".
type SandboxReading struct {
	Scope string
	Usage isolate.GroupUsage
	// Group says Usage came from one cgroup (the tenant's), with its
	// quotas; else memory and limits are sums over runtimes.
	Group bool
	Disks []Disk
	// Runtimes are the caller's sessions' runtimes' own usage, each with
	// its own limits.
	Runtimes []RuntimeUsage
	// Names are user names for uids the host's /etc/passwd may not know
	// (a tenant's uid is "user" in its view).
	Names map[uint32]string
}

// Disk is a folder the sandbox's code writes: Path as its code sees it,
// Host where it is on the host.
type Disk struct{ Path, Host string }

// ReadSandbox reads tenant's sandbox; runtimes are the caller's sessions'.
// Their own usage (Runtimes) is read with perRuntime, and always without
// tenant isolation, where the sums come from it. It neither makes a
// tenant nor counts a use of one: an observer does not keep a tenant
// from idling.
func (r *Runtimes) ReadSandbox(tenant string, runtimes []jupyter.Runtime, perRuntime bool) SandboxReading {
	var rd SandboxReading
	var roots []int
	var oom int64
	counted := false
	ts := r.iso.Tenants()
	for _, rt := range runtimes {
		if w, ok := rt.(interface{ limits() *isolate.Limits }); ok && w.limits().Grouped() {
			oom += int64(w.limits().OOMKillsSoFar())
			counted = true
		}
		if !perRuntime && ts != nil {
			continue
		}
		if u, ok := memPidsOf(rt); ok {
			rd.Runtimes = append(rd.Runtimes, u)
			roots = append(roots, u.PID)
		}
	}
	if ts != nil {
		rd.Scope = "tenant"
		t := ts.Peek(tenantKey(tenant))
		if t == nil {
			return rd
		}
		if u, ok := r.iso.TenantUsage(t); ok {
			rd.Usage, rd.Group = u, true
			// cgroup v1 counts an OOM kill in the group that ran out
			// only: a runtime's own limit's kills are not the tenant's.
			if r.iso.Mechanism() == isolate.CgroupV1 && u.OOMKills != nil {
				n := *u.OOMKills + oom
				rd.Usage.OOMKills = &n
			}
		} else {
			rd.Usage.PIDs = t.Processes()
			rd.Usage.Pids = int64(len(rd.Usage.PIDs))
		}
		rd.Names = map[uint32]string{t.UID: sandbox.UserName}
		v := t.View()
		rd.Disks = append(rd.Disks, Disk{Path: v.HomePath, Host: v.Home}, Disk{Path: "/tmp", Host: v.Tmp})
		if v.Work != "" && v.WorkPath != v.HomePath {
			rd.Disks = append(rd.Disks, Disk{Path: v.WorkPath, Host: v.Work})
		}
		return rd
	}
	rd.Scope = "sessions"
	memLimited, pidsLimited := len(rd.Runtimes) > 0, len(rd.Runtimes) > 0
	for _, u := range rd.Runtimes {
		rd.Usage.MemoryBytes += u.MemoryBytes
		rd.Usage.MemoryLimitBytes += u.MemoryLimitBytes
		rd.Usage.PidsLimit += u.PidsLimit
		memLimited = memLimited && u.MemoryLimitBytes > 0
		pidsLimited = pidsLimited && u.PidsLimit > 0
	}
	if !memLimited {
		rd.Usage.MemoryLimitBytes = 0
	}
	if !pidsLimited {
		rd.Usage.PidsLimit = 0
	}
	if counted {
		rd.Usage.OOMKills = &oom
	}
	rd.Usage.PIDs = proc.Descendants(roots)
	rd.Usage.Pids = int64(len(rd.Usage.PIDs))
	work := r.Workdir()
	if work == "" {
		work = "/"
	}
	if abs, err := filepath.Abs(work); err == nil {
		work = abs
	}
	rd.Disks = []Disk{{Path: work, Host: work}, {Path: "/tmp", Host: "/tmp"}}
	return rd
}

// memPidsOf is rt's memory and processes with their limits, from four
// files of its group (no CPU time: a sampler reads it per process), or
// UsageOf's reading of its process without one.
func memPidsOf(rt jupyter.Runtime) (RuntimeUsage, bool) {
	if w, ok := rt.(interface{ limits() *isolate.Limits }); ok {
		if mem, memLim, pids, pidsLim, ok := w.limits().MemPids(); ok {
			return RuntimeUsage{Source: "cgroup", PID: rt.Info().PID, MemoryBytes: mem, MemoryLimitBytes: memLim, Pids: pids, PidsLimit: pidsLim}, true
		}
	}
	return UsageOf(rt)
}
