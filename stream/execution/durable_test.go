package execution

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openTestStore(t *testing.T, path string, cfg Config) *Store {
	t.Helper()
	cfg.Path = path
	if cfg.LogBytes == 0 {
		cfg.LogBytes = 1 << 20
	}
	x, err := OpenStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// A finished execution is fetched after the store is closed and opened
// again, with the same answer; one that was running answers
// daemon_restarted; the cache in memory stays within its bound while
// every execution stays fetchable.
func TestDurableStoreSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "executions.db")
	x := openTestStore(t, path, Config{CacheBytes: 4096})
	k := Key{Language: "python", SessionID: "s", Code: "print(1)"}
	r, _, err := x.Claim("t", "e1", k)
	if err != nil {
		t.Fatal(err)
	}
	r.Started(0)
	finishRecord(r, "hello\n")
	for i := range 50 { // pushes e1 out of the cache
		o, _, _ := x.Claim("t", "", Key{Language: "python", Code: "x"})
		finishRecord(o, strings.Repeat("y", 200+i))
	}
	run, _, _ := x.Claim("t", "e2", Key{Language: "python", SessionID: "s", Code: "while True: pass"})
	run.Started(time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for x.Stats().Bytes > 4096+1024 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		x.Sweep(time.Now())
	}
	if st := x.Stats(); st.Bytes > 4096+1024 {
		t.Fatalf("the cache holds %d bytes, over its bound", st.Bytes)
	}
	got, err := x.Get("t", "e1")
	if err != nil {
		t.Fatalf("e1 after it left the cache: %v", err)
	}
	if v := got.View(); v.Result == nil || v.Result.Text("stdout") != "hello\n" || v.State != StateDone {
		t.Fatalf("e1 from disk: %+v", v)
	}
	if again, created, err := x.Claim("t", "e1", k); err != nil || created || again.View().Result.Text("stdout") != "hello\n" {
		t.Fatalf("a retry of e1 from disk: %v %v", created, err)
	}
	if _, _, err := x.Claim("t", "e1", Key{Language: "python", Code: "other"}); !errors.Is(err, ErrExecutionConflict) {
		t.Fatalf("another key on a stored id: %v", err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}

	y := openTestStore(t, path, Config{})
	defer y.Close()
	got, err = y.Get("t", "e1")
	if err != nil {
		t.Fatalf("e1 after reopening: %v", err)
	}
	v := got.View()
	if v.Result == nil || v.Result.Text("stdout") != "hello\n" || v.SessionID != "s" || v.Started.IsZero() {
		t.Fatalf("e1 after reopening: %+v", v)
	}
	if _, err := y.Get("other-tenant", "e1"); !errors.Is(err, ErrNoExecution) {
		t.Fatalf("another tenant's id: %v", err)
	}
	got, err = y.Get("t", "e2")
	if err != nil {
		t.Fatalf("e2, running when the store closed: %v", err)
	}
	if v := got.View(); v.State != StateDone || v.Result == nil || v.Result.ErrorKind != KindDaemonRestarted ||
		!strings.Contains(v.Result.Message(), "was running") {
		t.Fatalf("e2 after reopening: %+v", v)
	}
	var entries []Entry
	detach, err := got.Follow(0, func(e Entry) { entries = append(entries, e) })
	if err != nil || len(entries) != 1 || entries[0].Event.Result == nil {
		t.Fatalf("follow a stored execution: %v %+v", err, entries)
	}
	detach()
	if d, ok := y.Disk(); !ok || d.Records != 52 || d.Bytes <= 0 {
		t.Fatalf("disk stats: %+v %v", d, ok)
	}
}

// Retention applies on disk: past the bytes, the oldest go, and their
// ids answer gone.
func TestDurableStoreRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "executions.db")
	x := openTestStore(t, path, Config{RetentionBytes: 8192, CacheBytes: 1024})
	defer x.Close()
	var ids []string
	for range 40 {
		r, _, _ := x.Claim("t", "", Key{Language: "python", Code: "x"})
		finishRecord(r, strings.Repeat("z", 500))
		ids = append(ids, r.ID)
	}
	deadline := time.Now().Add(5 * time.Second)
	var gone *GoneError
	for {
		_, err := x.Get("t", ids[0])
		if errors.As(err, &gone) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the oldest is still held: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(gone.Why, "--execution-retention-bytes") {
		t.Fatalf("the oldest: %v", gone)
	}
	if d, _ := x.Disk(); d.Bytes > 8192 {
		t.Fatalf("disk holds %d bytes, over the retention", d.Bytes)
	}
	if _, err := x.Get("t", ids[len(ids)-1]); err != nil {
		t.Fatalf("the newest: %v", err)
	}
}

// bucketKeys counts the keys of one of the store's buckets (bucketRun:
// the claims written).
func bucketKeys(t *testing.T, x *Store, bucket []byte) int {
	t.Helper()
	n := 0
	if err := x.disk.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucket).Stats().KeyN
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestClaimsWrittenOnceOld: an execution that ends within claimAfter
// never has its claim written (no write to delete it again); one still
// running after claimAfter has it written, so a crash finds it; a stop
// writes the young ones too.
func TestClaimsWrittenOnceOld(t *testing.T) {
	x := openTestStore(t, filepath.Join(t.TempDir(), "executions.db"), Config{})
	fast, _, _ := x.Claim("t", "fast", Key{Language: "python", Code: "1"})
	fast.Started(0)
	slow, _, _ := x.Claim("t", "slow", Key{Language: "python", Code: "while True: pass"})
	slow.Started(0)
	x.flush(false)
	if n := bucketKeys(t, x, bucketRun); n != 0 {
		t.Fatalf("%d claims written before claimAfter", n)
	}
	finishRecord(fast, "1\n")
	slow.mu.Lock()
	slow.Created = slow.Created.Add(-2 * claimAfter) // as if it ran for 2 s
	slow.mu.Unlock()
	x.flush(false)
	if n := bucketKeys(t, x, bucketRun); n != 1 {
		t.Fatalf("%d claims written after claimAfter, want the slow one", n)
	}
	if fast.claimed.Load() || !slow.claimed.Load() {
		t.Fatalf("claimed: fast %v, slow %v", fast.claimed.Load(), slow.claimed.Load())
	}
	young, _, _ := x.Claim("t", "young", Key{Language: "python", Code: "while True: pass"})
	young.Started(0)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	y := openTestStore(t, x.cfg.Path, Config{})
	defer y.Close()
	for _, id := range []string{"slow", "young"} {
		got, err := y.Get("t", id)
		if err != nil {
			t.Fatalf("%s after a stop: %v", id, err)
		}
		if v := got.View(); v.Result == nil || v.Result.ErrorKind != KindDaemonRestarted {
			t.Fatalf("%s after a stop: %+v", id, v)
		}
	}
	if got, err := y.Get("t", "fast"); err != nil || got.View().Result.Text("stdout") != "1\n" {
		t.Fatalf("fast after a stop: %v", err)
	}
}

// A store on a full disk (a small tmpfs, filled): each failed write is
// counted and reported, memory keeps the retention's bytes at most, and
// once there is room again what waited is written, nothing dropped.
func TestDurableStoreOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("mounting a tmpfs needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	var mu sync.Mutex
	var reported []error
	x := openTestStore(t, filepath.Join(dir, "executions.db"), Config{RetentionBytes: 64 << 10, CacheBytes: 16 << 10,
		OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	defer x.Close()
	fill := filepath.Join(dir, "fill")
	f, err := os.Create(fill)
	if err != nil {
		t.Fatal(err)
	}
	for { // every block the store has not taken
		if _, err := f.Write(make([]byte, 64<<10)); err != nil {
			break
		}
	}
	f.Close()
	for i := range 200 {
		r, _, err := x.Claim("t", fmt.Sprintf("e%03d", i), Key{Language: "python", Code: "x"})
		if err != nil {
			t.Fatal(err)
		}
		finishRecord(r, strings.Repeat("y", 1000))
	}
	flushUntil(t, x, "a write fails", func() bool { return x.Errors() > 0 })
	x.Sweep(time.Now())
	if st := x.Stats(); st.Bytes > 64<<10 {
		t.Fatalf("memory holds %d bytes of finished executions while the disk is full, over the retention's %d", st.Bytes, 64<<10)
	}
	mu.Lock()
	if len(reported) == 0 || !strings.Contains(reported[0].Error(), "executions.db") {
		t.Fatalf("reported: %v", reported)
	}
	mu.Unlock()
	last, err := x.Get("t", "e199")
	if err != nil {
		t.Fatalf("the newest execution while the disk is full: %v", err)
	}
	if v := last.View(); v.Result == nil || v.Result.Text("stdout") != strings.Repeat("y", 1000) {
		t.Fatalf("e199: %+v", v)
	}
	os.Remove(fill)
	flushUntil(t, x, "e199 is written again", last.persisted.Load)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	y := openTestStore(t, filepath.Join(dir, "executions.db"), Config{RetentionBytes: 64 << 10})
	defer y.Close()
	got, err := y.Get("t", "e199")
	if err != nil || got.View().Result.Text("stdout") != strings.Repeat("y", 1000) {
		t.Fatalf("e199 after reopening: %v", err)
	}
}

// flushUntil has the writer flush until cond holds, for 30 s at most.
func flushUntil(t *testing.T, x *Store, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("30 s of flushes and not yet: %s", what)
		}
		x.disk.kick <- struct{}{} // the writer takes it, then flushes
	}
}
