package snapshot

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// A saved session moves between two managers that share a key (replicas
// of a cluster): the one it leaves hands its file over, the other takes
// it in and it waits there for a restore. A file of another tenant, one
// sealed with another key, and one older than what the session has are
// not taken.
func TestHandoverAndImport(t *testing.T) {
	key := bytes.Repeat([]byte{7}, keySize)
	from := testManager(t, Config{Key: key})
	to := testManager(t, Config{Key: key})
	stranger := testManager(t, Config{}) // its own key
	now := time.Now().UTC()
	k := Key{"jwt:alice", "python", "s"}
	put(t, from, k, now.Add(-time.Minute), true)
	newest := put(t, from, k, now, true)
	put(t, stranger, k, now.Add(time.Minute), true)

	files := from.Handover("jwt:alice")
	if len(files) != 1 || files[0].Info.SnapshotID != newest.SnapshotID {
		t.Fatalf("handed over %+v, want the latest snapshot only", files)
	}
	take := func(m *Manager, tenant string, f HandoverFile) (bool, error) {
		fh, err := os.Open(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		return m.Import(tenant, fh, f.Size)
	}
	if took, err := take(to, "jwt:bob", files[0]); took || err == nil {
		t.Fatalf("bob took alice's snapshot: %v %v", took, err)
	}
	if took, err := take(to, "jwt:alice", stranger.Handover("jwt:alice")[0]); took || err == nil {
		t.Fatalf("a snapshot sealed with another key was taken: %v %v", took, err)
	}
	if took, err := take(to, "jwt:alice", files[0]); !took || err != nil {
		t.Fatalf("alice's snapshot was not taken: %v %v", took, err)
	}
	if info, pending := to.Latest(k); info == nil || !pending || info.SnapshotID != newest.SnapshotID {
		t.Fatalf("after the import: %+v pending %v", info, pending)
	}
	if took, err := take(to, "jwt:alice", files[0]); took || err != nil {
		t.Fatalf("the same snapshot again: %v %v; want it left (not newer)", took, err)
	}
}
