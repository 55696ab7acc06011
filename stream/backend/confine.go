package backend

import (
	"os/exec"
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
