package backend

import (
	"github.com/aiod/aiod/stream/backend/isolate"
	"github.com/aiod/aiod/stream/backend/sandbox"
)

// Tenants unused for Config.TenantIdle that run nothing are let go
// (sandbox.Tenants.ReleaseIdle): their namespace, egress proxy and file
// helper are closed, their folders and uid stay. What runs is known from
// the tenants' cgroups, which every runtime, terminal and one-shot joins
// before it runs; without a cgroup mechanism (no limits set, or rlimits
// only) tenants are kept for aiod's life.
func (r *Runtimes) releaseIdleTenants() {
	ts := r.iso.Tenants()
	if ts == nil || r.cfg.TenantIdle <= 0 {
		return
	}
	if m := r.iso.Mechanism(); m != isolate.CgroupV1 && m != isolate.CgroupV2 {
		r.log.Info("idle tenants are kept: what they run is known from cgroups, which aiod does not use here", "mechanism", m)
		return
	}
	ts.ReleaseIdle(r.cfg.TenantIdle, r.tenantBusy)
}

// tenantBusy says whether t has runtimes (its cgroup) or pools. Called
// with the tenants' registry locked: the isolator's and the pools' locks
// come after it.
func (r *Runtimes) tenantBusy(t *sandbox.Tenant) bool {
	if r.iso.TenantRuns(t) {
		return true
	}
	tp := r.tpools
	if tp == nil {
		return false
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.byKey[t.Key] != nil
}

// current is the sandbox a start for t uses, held until done (t is not let
// go under a start that holds no cgroup yet): t, or when t was let go
// after idling (a session's backend keeps the tenant it was made for),
// the tenant's sandbox made anew.
func (r *Runtimes) current(t *sandbox.Tenant) (*sandbox.Tenant, func(), error) {
	if t == nil {
		return nil, func() {}, nil
	}
	return r.iso.Tenants().Use(t)
}

// tenantFor is tenant key's sandbox (nil without tenant isolation), held
// until done, for a start.
func (r *Runtimes) tenantFor(key string) (*sandbox.Tenant, func(), error) {
	t, err := r.iso.Tenant(key)
	if err != nil {
		return nil, nil, err
	}
	return r.current(t)
}

// BeforeTenantRelease sets f, run with a tenant's key before its sandbox
// is let go after idling (its shutdown hooks); it may run code as the
// tenant. Without tenant isolation it is never called.
func (r *Runtimes) BeforeTenantRelease(f func(tenant string)) {
	if ts := r.iso.Tenants(); ts != nil {
		ts.BeforeRelease(f)
	}
}
