package snapshot

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "snapshots")
	}
	m, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func put(t *testing.T, m *Manager, k Key, created time.Time, pending bool) *Info {
	t.Helper()
	info := &Info{SnapshotID: newID(created), Tenant: k.Tenant, Language: k.Language, SessionID: k.ID, Created: created,
		Saved: []string{"x"}, Skipped: map[string]string{}}
	if err := m.store(k, info, bytes.NewReader(make([]byte, 1000)), 1000, pending, m.epochOf(k)); err != nil {
		t.Fatal(err)
	}
	return info
}

// The index: saved sessions per tenant, the last few per session, Forget,
// a save that a Forget overtook, retention and the total, and a new
// manager on the same folder finding every saved session again (and
// refusing a file that does not verify).
func TestManagerIndex(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snapshots")
	m := testManager(t, Config{Dir: dir, TotalBytes: 1 << 30})
	a, b := Key{"t1", "python", "a"}, Key{"t1", "python", "b"}
	other := Key{"t2", "python", "a"}
	now := time.Now()
	for i := range 5 {
		put(t, m, a, now.Add(time.Duration(i)*time.Millisecond), i == 4)
	}
	put(t, m, b, now, false)
	put(t, m, other, now, true)
	if st := m.Stats(); st.Snapshots != 3+1+1 || st.Sessions != 3 || st.Waiting != 2 {
		t.Fatalf("stats: %+v", st)
	}
	if saved := m.Saved("t1"); len(saved) != 1 || saved[0].SessionID != "a" {
		t.Fatalf("t1's saved sessions: %+v", saved)
	}
	if n := m.Forget("t1", "", "b"); n != 1 || m.Stats().Sessions != 2 {
		t.Fatalf("forget b: %d %+v", n, m.Stats())
	}
	// A save that began before a Forget is dropped.
	epoch := m.epochOf(a)
	done := m.beginSave(a)
	m.Forget("t1", "python", "a")
	info := &Info{SnapshotID: newID(now), Tenant: "t1", Language: "python", SessionID: "a", Created: now}
	if err := m.store(a, info, strings.NewReader("p"), 1, true, epoch); err == nil {
		t.Fatal("a save overtaken by a delete was kept")
	}
	done()
	if _, err := os.Stat(info.path); !os.IsNotExist(err) {
		t.Fatalf("its file: %v", err)
	}
	put(t, m, a, now, true)
	m.Close()

	// A changed file is not indexed by the next manager.
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*"+fileExtension))
	if len(files) != 2 {
		t.Fatalf("%d files, want 2", len(files))
	}
	m2 := testManager(t, Config{Dir: dir})
	if st := m2.Stats(); st.Waiting != 2 {
		t.Fatalf("reopened: %+v", st)
	}
	m2.Close()
	raw, _ := os.ReadFile(files[0])
	raw[len(magic)+6] ^= 1
	if err := os.WriteFile(files[0], raw, 0o600); err != nil {
		t.Fatal(err)
	}
	m3 := testManager(t, Config{Dir: dir})
	if st := m3.Stats(); st.Waiting != 1 {
		t.Fatalf("with a changed file: %+v", st)
	}

	// A session whose latest snapshot was taken on request does not wait
	// for a restore after a restart (its state may have moved on since);
	// one taken at shutdown does.
	c := Key{"t1", "python", "c"}
	req := put(t, m3, c, now, false)
	req.Why = WhyRequest
	m3.Close()
	if err := writeFile(m3.key, req.path, req, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	m3 = testManager(t, Config{Dir: dir})
	if m3.Pending(c) {
		t.Fatal("a session with only a requested snapshot waits for a restore after a restart")
	}

	// Retention and the total.
	m3.cfg.Retention = time.Hour
	put(t, m3, b, now.Add(-2*time.Hour), true)
	m3.sweep(now)
	if m3.Pending(b) {
		t.Fatal("a snapshot past the retention was kept")
	}
	m3.cfg.TotalBytes = 1
	m3.sweep(now)
	if st := m3.Stats(); st.Snapshots != 0 || st.Bytes != 0 {
		t.Fatalf("over the total: %+v", st)
	}
}

// One tenant's snapshots never push out another's that holds less: bob's
// flood of saves stays within his own bytes, and alice's saved session
// waits for its restore still (the total was swept oldest first across
// tenants, and bob's saves deleted alice's session).
func TestSnapshotsBoundPerTenant(t *testing.T) {
	m := testManager(t, Config{TenantBytes: 6 << 10, TotalBytes: 8 << 10})
	alice := Key{"alice", "python", "keep"}
	now := time.Now()
	put(t, m, alice, now.Add(-time.Hour), true)
	for i := range 20 {
		put(t, m, Key{"bob", "python", fmt.Sprintf("s%d", i)}, now.Add(time.Duration(i)*time.Millisecond), true)
	}
	if !m.Pending(alice) {
		t.Fatal("bob's snapshots pushed alice's saved session out")
	}
	var bob int64
	for k, e := range m.index {
		for _, i := range e.snaps {
			if k.Tenant == "bob" {
				bob += i.size
			}
		}
	}
	if bob > 6<<10 || m.Stats().Bytes > 8<<10 {
		t.Fatalf("bob holds %d bytes (his bound 6 KiB), all %d (8 KiB)", bob, m.Stats().Bytes)
	}
	if !m.Pending(Key{"bob", "python", "s19"}) {
		t.Fatal("bob's newest save was the one deleted")
	}
	// Over the total with every tenant within its own bound: the tenant
	// holding the most gives first.
	m.cfg.TotalBytes = 3 << 10
	m.sweep(now)
	if !m.Pending(alice) {
		t.Fatal("the total's sweep took alice's only snapshot while bob held more")
	}
}
