package snapshot

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Moving saved sessions between replicas of a cluster: the replica a
// tenant leaves hands over the files of its saved sessions (Handover), and
// the one it moves to takes them in (Import), where they wait for a
// restore on their session's next call as after a restart.

// Handover is the file of the latest snapshot of each of tenant's sessions
// that waits for a restore (saved as its runtime went: idle, shutdown),
// with what its header says.
func (m *Manager) Handover(tenant string) []HandoverFile {
	var out []HandoverFile
	for _, info := range m.Saved(tenant) {
		out = append(out, HandoverFile{Info: *info, Path: info.path, Size: info.size})
	}
	return out
}

// HandoverFile is a snapshot file to hand over.
type HandoverFile struct {
	Info Info
	Path string
	Size int64
}

// Import takes in a snapshot file another replica wrote (n bytes from r):
// it must verify with this manager's key and name tenant; it then waits
// for a restore on its session's next call, unless the session already has
// a snapshot as new or newer here. It reports whether it was taken.
func (m *Manager) Import(tenant string, r io.Reader, n int64) (bool, error) {
	if n <= 0 || n > m.cfg.MaxBytes+1<<20 {
		return false, fmt.Errorf("a snapshot file of %d bytes (at most --snapshot-max-bytes)", n)
	}
	tmp, err := os.CreateTemp(m.cfg.Dir, ".import-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.CopyN(tmp, r, n); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	info, size, err := readHeader(m.key, tmp.Name())
	if err != nil {
		return false, err
	}
	if info.Tenant != tenant {
		return false, ErrTampered
	}
	// The whole file verifies before it is indexed.
	if _, err := copyPayload(m.key, tmp.Name(), m.cfg.MaxBytes, io.Discard); err != nil {
		return false, err
	}
	k := Key{info.Tenant, info.Language, info.SessionID}
	if latest, _ := m.Latest(k); latest != nil && !latest.Created.Before(info.Created) {
		return false, nil
	}
	dir := m.sessionDir(k)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	path := filepath.Join(dir, info.SnapshotID+fileExtension)
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, err
	}
	info.path, info.size = path, size
	m.add(k, info, true)
	m.bound(tenant)
	return true, nil
}
