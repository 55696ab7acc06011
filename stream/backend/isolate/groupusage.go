package isolate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"

	"github.com/aiod/aiod/stream/backend/sandbox"
)

// GroupUsage is what a tenant's group holds now: every runtime, terminal
// and process of the tenant, with its quotas. Breakdown fields are nil
// where this cgroup version does not count them. Limits of 0 are none.
type GroupUsage struct {
	MemoryBytes, MemoryPeakBytes, MemoryLimitBytes int64
	Anon, File, Shmem, Slab                        *int64
	OOMKills                                       *int64
	Pids, PidsLimit                                int64
	NrPeriods, NrThrottled, ThrottledUsec          *int64
	CPUUsec                                        *int64 // the group's CPU time, where its cgroup counts it (v2)
	PIDs                                           []int  // the processes in it, its runtimes' groups included
}

// Grouped says whether the runtime has a cgroup of its own (not rlimits).
func (l *Limits) Grouped() bool { return l != nil && l.mgr != nil }

// MemPids reads the runtime's memory and processes now and their limits
// (0: none) from four files of its group, a fraction of Usage's reads:
// what a sampler compares at each tick. ok is false without a group.
func (l *Limits) MemPids() (mem, memLimit, pids, pidsLimit int64, ok bool) {
	if !l.Grouped() {
		return 0, 0, 0, 0, false
	}
	num := func(dir, file string) int64 {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n >= 1<<62 {
			return 0 // "max", or v1's unlimited
		}
		return n
	}
	if l.is.mechanism == CgroupV2 {
		return num(l.dir, "memory.current"), num(l.dir, "memory.max"), num(l.dir, "pids.current"), num(l.dir, "pids.max"), true
	}
	m, p := l.mgr.Path("memory"), l.mgr.Path("pids")
	return num(m, "memory.usage_in_bytes"), num(m, "memory.limit_in_bytes"), num(p, "pids.current"), num(p, "pids.max"), true
}

// TenantUsage reads t's group; false when it has none now (no runtime
// runs for it, or limits are not cgroups).
func (is *Isolator) TenantUsage(t *sandbox.Tenant) (GroupUsage, bool) {
	if is == nil || t == nil {
		return GroupUsage{}, false
	}
	is.tg.mu.Lock()
	g := is.tg.held[tenantGroupName(t)]
	is.tg.mu.Unlock()
	if g == nil {
		return GroupUsage{}, false
	}
	st, err := g.mgr.GetStats()
	if err != nil {
		return GroupUsage{}, false
	}
	ms := st.MemoryStats
	var u GroupUsage
	u.MemoryBytes, u.MemoryPeakBytes, u.MemoryLimitBytes, u.Pids, u.PidsLimit = memPidsOf(st)
	stat := func(keys ...string) *int64 {
		for _, k := range keys {
			if v, ok := ms.Stats[k]; ok {
				n := int64(v)
				return &n
			}
		}
		return nil
	}
	// v1 counts a hierarchy under total_*, v2 under plain names.
	u.Anon, u.File, u.Shmem, u.Slab = stat("total_rss", "anon"), stat("total_cache", "file"), stat("total_shmem", "shmem"), stat("slab")
	if n, err := g.mgr.OOMKillCount(); err == nil {
		k := int64(n)
		u.OOMKills = &k
	}
	if td := st.CpuStats.ThrottlingData; td.Periods > 0 {
		p, t, us := int64(td.Periods), int64(td.ThrottledPeriods), int64(td.ThrottledTime/1000)
		u.NrPeriods, u.NrThrottled, u.ThrottledUsec = &p, &t, &us
	}
	if ns := st.CpuStats.CpuUsage.TotalUsage; ns > 0 {
		us := int64(ns / 1000)
		u.CPUUsec = &us
	}
	for _, c := range []string{"", "pids", "memory", "cpu"} {
		if p := g.mgr.Path(c); p != "" {
			if pids, err := cgroups.GetAllPids(p); err == nil {
				u.PIDs = pids
				break
			}
		}
	}
	return u, true
}
