package backend

import (
	"os/exec"
	"sync"
	"syscall"

	"github.com/aiod/aiod/kernel"
	"github.com/aiod/aiod/stream/backend/sandbox"
)

// confineKernel is kernel.Options.Confine for tenant t: a forked kernel's
// child applies the view's plan on top of its template's namespace, a
// spawned kernel is wrapped; either finds its connection folder at
// sandbox.KernelDir. Nil (no confinement) when t is nil.
func confineKernel(t *sandbox.Tenant) func(dir string) (*kernel.Confinement, error) {
	if t == nil {
		return nil
	}
	return func(dir string) (*kernel.Confinement, error) {
		v := t.View()
		files := t.Files()
		return &kernel.Confinement{
			View: sandbox.KernelDir, Plan: v.RuntimePlan(true, dir).JSON(), Files: files,
			Wrap:  func(cmd *exec.Cmd) { sandbox.Wrap(cmd, v.RuntimePlan(false, dir), files) },
			Owner: &syscall.Credential{Uid: t.UID, Gid: t.GID},
		}, nil
	}
}

// wrapIn confines a spawned runtime's command in tenant t's sandbox; nil
// when t is nil.
func wrapIn(t *sandbox.Tenant) func(*exec.Cmd) {
	if t == nil {
		return nil
	}
	return func(cmd *exec.Cmd) { sandbox.Wrap(cmd, t.View().RuntimePlan(false, ""), t.Files()) }
}

// wrapTerminal is wrapIn for a terminal's shell, whose pty aiod opened on
// the host's devpts: it keeps that one (its /dev/pts/N and tty name), and
// a terminal's count is bounded by the terminals' own cap.
func wrapTerminal(t *sandbox.Tenant) func(*exec.Cmd) {
	if t == nil {
		return nil
	}
	return func(cmd *exec.Cmd) {
		v := t.View()
		v.Ptys = 0
		sandbox.Wrap(cmd, v.RuntimePlan(false, ""), t.Files())
	}
}

// RuntimesReachAPI reports whether runtimes can reach aiod's port and can
// be told from other callers by their uid: tenants on the host's network,
// or --runtime-user without tenant isolation. (Tenants without a network
// cannot reach it; runtimes running as aiod's own user cannot be told apart.)
func (r *Runtimes) RuntimesReachAPI() bool {
	if ts := r.iso.Tenants(); ts != nil {
		return ts.Network() == sandbox.NetworkHost
	}
	return r.iso.Credential() != nil
}

// IsRuntimeUID reports whether uid is one local runtimes run as.
func (r *Runtimes) IsRuntimeUID(uid uint32) bool {
	if ts := r.iso.Tenants(); ts != nil {
		return ts.IsTenantUID(uid)
	}
	c := r.iso.Credential()
	return c != nil && c.Uid == uid
}

// userFiles is the file helper running as --runtime-user (without tenant
// isolation), made on first use.
type userFiles struct {
	once sync.Once
	f    *sandbox.Files
	err  error
}

// Files is where the file plane acts for tenant: in the tenant's view as
// its uid (its helper) under tenant isolation, as --runtime-user on the
// host's view without it, or nil: the host with aiod's own rights.
func (r *Runtimes) Files(tenant string) (*sandbox.Files, error) {
	if ts := r.iso.Tenants(); ts != nil {
		return ts.Files(tenantKey(tenant))
	}
	c := r.iso.Credential()
	if c == nil {
		return nil, nil
	}
	r.userFiles.once.Do(func() {
		r.userFiles.f, r.userFiles.err = sandbox.FilesAs(c.Uid, c.Gid, r.Workdir(), r.log)
	})
	return r.userFiles.f, r.userFiles.err
}

func tenantKey(tenant string) string {
	if tenant == "" {
		return "default"
	}
	return tenant
}

// TenantCount is how many tenants' sandboxes aiod holds; ok is false
// without tenant isolation.
func (r *Runtimes) TenantCount() (n int, ok bool) {
	if ts := r.iso.Tenants(); ts != nil {
		return ts.Count(), true
	}
	return 0, false
}

// Tenanted reports whether tenant isolation is on.
func (r *Runtimes) Tenanted() bool { return r.iso.Tenants() != nil }

// TenantSandbox is tenant's sandbox (its folders, uid and view); nil
// without tenant isolation.
func (r *Runtimes) TenantSandbox(tenant string) (*sandbox.Tenant, error) {
	return r.iso.Tenant(tenant)
}

// Egress counts the egress proxies' decisions; ok is false without them
// (--runtime-network other than allow).
func (r *Runtimes) Egress() (allowed, refused uint64, ok bool) {
	ts := r.iso.Tenants()
	if ts == nil || ts.Network() != sandbox.NetworkAllow {
		return 0, 0, false
	}
	allowed, refused = ts.Egress()
	return allowed, refused, true
}
