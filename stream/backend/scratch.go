package backend

import (
	"os"
	"sync"
)

// ScratchDir is a folder a session's runtime and aiod both reach, for
// payloads too large to pass through the runtime's stdout (snapshots):
// the runtime sees it at View, aiod at Host, and files the runtime writes
// there are UID's.
type ScratchDir struct {
	View, Host string
	UID, GID   int
}

// scratch is the folder of runtimes outside tenants' sandboxes: one per
// daemon under the temporary folder, 0700 and the runtime user's.
type scratch struct {
	once sync.Once
	dir  string
	err  error
}

// Scratch is the scratch folder of tenant's runtimes of the backend named
// backendName: under tenant isolation the tenant's own /tmp, else a folder
// of the runtime user's; nil for a remote kernel, which shares no folder
// with aiod, or when none can be made.
func (r *Runtimes) Scratch(tenant, backendName string) *ScratchDir {
	if backendName == Remote {
		return nil
	}
	if r.iso.Tenants() != nil {
		t, err := r.iso.Tenant(tenant)
		if err != nil || t == nil {
			return nil
		}
		return &ScratchDir{View: "/tmp", Host: t.View().Tmp, UID: int(t.UID), GID: int(t.GID)}
	}
	uid, gid := os.Getuid(), os.Getgid()
	if c := r.iso.Credential(); c != nil {
		uid, gid = int(c.Uid), int(c.Gid)
	}
	r.scratch.once.Do(func() {
		r.scratch.dir, r.scratch.err = os.MkdirTemp("", "aiod-scratch-")
		if r.scratch.err == nil {
			r.scratch.err = os.Lchown(r.scratch.dir, uid, gid)
		}
	})
	if r.scratch.err != nil {
		r.log.Warn("no scratch folder for snapshots: their payloads go through the runtimes' stdout", "err", r.scratch.err)
		return nil
	}
	return &ScratchDir{View: r.scratch.dir, Host: r.scratch.dir, UID: uid, GID: gid}
}
