package isolate

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/opencontainers/cgroups"

	"github.com/aiod/aiod/stream/backend/sandbox"
)

// A tenant's runtimes share a group of their own between the runtimes'
// parent and theirs:
//
//	aiod-PID/[runtimes/]tenant-UID/N
//
// so that what one tenant runs, however many runtimes and processes, is
// weighed against each other tenant as one: the CPU scheduler shares the
// runtimes' time among busy tenants first (every tenant group has the
// default weight), then among a tenant's runtimes. The group also holds
// the tenant's quotas, Config.TenantMemoryBytes and TenantPids. It is
// made with the tenant's first runtime and removed with its last. Runtimes
// started for no tenant (no tenant isolation) sit directly under the
// parent, as before.

// tenantGroups counts the runtimes in each tenant's group.
type tenantGroups struct {
	mu   sync.Mutex
	held map[string]*tenantGroup
}

type tenantGroup struct {
	n   int // runtimes in it, and starts about to put one there
	mgr cgroups.Manager
}

// tenantGroupName is tenant t's group, named by its uid: a spare sandbox
// that becomes a tenant's keeps it, and no two live tenants share a uid.
func tenantGroupName(t *sandbox.Tenant) string {
	return "tenant-" + strconv.FormatUint(uint64(t.UID), 10)
}

// holdTenant makes t's group (with the tenant quotas) if it is not there
// and counts one more runtime in it; the runtime's own group goes under
// the folder it returns for each controller (v1) or the single folder
// (v2). releaseTenant undoes it.
func (is *Isolator) holdTenant(t *sandbox.Tenant) (string, error) {
	name := tenantGroupName(t)
	is.tg.mu.Lock()
	defer is.tg.mu.Unlock()
	if g := is.tg.held[name]; g != nil {
		g.n++
		return name, nil
	}
	m, err := is.makeGroup(name, is.memPids(is.cfg.TenantMemoryBytes, is.cfg.TenantPids))
	if err != nil {
		return "", fmt.Errorf("make the cgroup of tenant %s: %w", t.Key, err)
	}
	if is.tg.held == nil {
		is.tg.held = map[string]*tenantGroup{}
	}
	is.tg.held[name] = &tenantGroup{n: 1, mgr: m}
	return name, nil
}

// releaseTenant counts one runtime less in the group name, and removes
// the group when none is left.
func (is *Isolator) releaseTenant(name string) error {
	is.tg.mu.Lock()
	defer is.tg.mu.Unlock()
	g := is.tg.held[name]
	if g == nil {
		return nil
	}
	if g.n--; g.n > 0 {
		return nil
	}
	delete(is.tg.held, name)
	if err := g.mgr.Destroy(); err != nil {
		return fmt.Errorf("remove the cgroup %s: %w", name, err)
	}
	return nil
}

// tenantPeak is the peak memory of the tenant group name, 0 when it
// cannot be read.
func (is *Isolator) tenantPeak(name string) int64 {
	is.tg.mu.Lock()
	g := is.tg.held[name]
	is.tg.mu.Unlock()
	if g == nil {
		return 0
	}
	st, err := g.mgr.GetStats()
	if err != nil {
		return 0
	}
	return int64(st.MemoryStats.Usage.MaxUsage)
}

// TenantGroups is how many tenant groups exist now.
func (is *Isolator) TenantGroups() int {
	is.tg.mu.Lock()
	defer is.tg.mu.Unlock()
	return len(is.tg.held)
}

// TenantRuns says whether t's group holds a runtime, or a start about to
// put one there.
func (is *Isolator) TenantRuns(t *sandbox.Tenant) bool {
	is.tg.mu.Lock()
	defer is.tg.mu.Unlock()
	g := is.tg.held[tenantGroupName(t)]
	return g != nil && g.n > 0
}
