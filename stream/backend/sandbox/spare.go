package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The spare sandbox. A runtime is confined before it runs anything (a
// kernel cannot enter a tenant's mount and user namespaces once ipykernel
// has threads), so a pooled runtime must start in the sandbox of the
// tenant that will claim it. For tenants aiod has never seen, Tenants keeps
// one sandbox made ahead, the spare: a uid of the range, its folders (in a
// folder whose name folderName never makes) and its network namespace (and
// egress proxy), in which the backend keeps a pool of runtimes. The first
// new tenant to arrive adopts it: the folder is renamed to the tenant's
// (the runtimes already in it keep their mounts, which follow the folders,
// not their names), the uid stays, the proxy's logs name the tenant, and
// the runtimes become the tenant's pool. Nothing in the spare names it: its
// account is UserName with HOME at HomePath like every tenant's, and a
// runtime's environment, working folder and connection folder are the same
// for every tenant.
//
// A tenant that has a folder already (one seen before a restart) never
// adopts the spare: its files and uid are in its own. A spare is removed
// when aiod closes, and one left by a daemon that did not close is removed
// when the next one starts (its uid is free again).

// sparePrefix begins a spare's folder name: folderName trims leading dots,
// so no tenant's folder begins with one.
const sparePrefix = ".spare-"

// SpareKey is the spare's Key until a tenant adopts it.
const SpareKey = "(spare)"

// OnAdopt sets f, called when a tenant adopts the spare with the spare and
// the tenant it became (the same uid, network namespace and folders, at
// the tenant's folder). f runs with the registry's lock held, so that no
// caller sees the tenant before f has run: it must not call Tenants.
func (ts *Tenants) OnAdopt(f func(spare, t *Tenant)) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.onAdopt = f
}

// MakeSpare makes the spare sandbox when there is none, and calls made
// with it, with the registry's lock held (as OnAdopt's f, so that the
// spare cannot be adopted before made has run): made must not call
// Tenants. It reports whether it made one.
//
// The spare is made without the registry's lock, as Get makes a tenant.
func (ts *Tenants) MakeSpare(made func(sp *Tenant)) (bool, error) {
	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		return false, errShuttingDown
	}
	if ts.spare != nil || ts.sparing {
		ts.mu.Unlock()
		return false, nil
	}
	ts.sparing = true
	ts.mu.Unlock()
	var b [5]byte
	_, _ = rand.Read(b[:]) // never fails
	name := sparePrefix + hex.EncodeToString(b[:])
	t, err := ts.make(SpareKey, name)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.sparing = false
	if err == nil && ts.closed {
		t.release()
		err = errShuttingDown
	}
	if err != nil {
		ts.removeSpare(filepath.Join(ts.dir, name))
		return false, fmt.Errorf("make the spare sandbox: %w", err)
	}
	ts.spare = t
	ts.log.Info("spare sandbox ready", "uid", t.UID, "dir", t.Dir)
	if made != nil {
		made(t)
	}
	return true, nil
}

// adoptSpare makes the spare key's sandbox and returns it; nil when there
// is no spare, when key has a folder already, or when the spare's folder
// cannot be renamed (then the spare stays). ts.mu is held.
func (ts *Tenants) adoptSpare(key string) *Tenant {
	sp := ts.spare
	if sp == nil {
		return nil
	}
	name := folderName(key)
	dir := filepath.Join(ts.dir, name)
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		return nil // seen before (or unreadable): its own folder and uid
	}
	keyFile := filepath.Join(sp.Dir, "key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		ts.log.Warn("adopt the spare sandbox", "tenant", key, "err", err)
		return nil
	}
	if err := os.Rename(sp.Dir, dir); err != nil {
		_ = os.WriteFile(keyFile, []byte(SpareKey+"\n"), 0o600)
		ts.log.Warn("adopt the spare sandbox", "tenant", key, "err", err)
		return nil
	}
	ts.spare = nil
	ts.used[sp.UID] = name
	t := &Tenant{Key: key, Dir: dir, UID: sp.UID, GID: sp.GID, view: rebase(sp.view, sp.Dir, dir), net: sp.net, proxy: sp.proxy}
	if t.proxy != nil {
		t.proxy.setTenant(key)
	}
	ts.log.Info("tenant ready", "tenant", key, "uid", t.UID, "dir", t.Dir, "from", "the spare sandbox")
	if ts.onAdopt != nil {
		ts.onAdopt(sp, t)
	}
	return t
}

// removeSpare removes a spare's folder dir and frees its uid; ts.mu is
// held.
func (ts *Tenants) removeSpare(dir string) {
	name := filepath.Base(dir)
	if !strings.HasPrefix(name, sparePrefix) {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		ts.log.Warn("remove the spare sandbox", "dir", dir, "err", err)
		return // its uid stays taken: its files may still be there
	}
	for uid, n := range ts.used {
		if n == name {
			delete(ts.used, uid)
		}
	}
}

// rebase is v with the folders under from moved to to.
func rebase(v View, from, to string) View {
	for _, p := range []*string{&v.Home, &v.Tmp, &v.VarTmp, &v.Shm, &v.Work, &v.Passwd, &v.Group} {
		if *p == "" {
			continue
		}
		if rel, err := filepath.Rel(from, *p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			*p = filepath.Join(to, rel)
		}
	}
	return v
}
