package execution

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// piecesOf is how many pieces a value of n bytes is cut into.
func piecesOf(n int) int { return (n + chunkBytes - 1) / chunkBytes }

// Large answers are stored in pieces: read back whole (from memory's
// cache and after a reopen), with their escapes and multi-byte text; a
// record written again replaces its pieces; the retention deletes them
// with their record; a value of the older JSON-only form still reads.
func TestLargeRecordsInPieces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "executions.db")
	x := openTestStore(t, path, Config{CacheBytes: 4096, RetentionBytes: 1 << 20})
	text := strings.Repeat("é \"quoted\" \\ tab\t line\n", 12000) // 300 KB
	var ids []string
	for i := range 2 {
		r, _, err := x.Claim("t", "", Key{Language: "python", Code: "print(big)"})
		if err != nil {
			t.Fatal(err)
		}
		r.Deliver(Event{Result: &Result{Status: StatusOK, Outputs: []*Output{
			{Type: "stream", Name: "stdout", Text: text[i:]},
			{Type: "error", Ename: "ValueError", Evalue: "v", Traceback: []string{"tb"}},
			{Type: "stream", Name: "stderr", Text: "warn\n"}}}})
		ids = append(ids, r.ID)
	}
	stored := func(id string) bool {
		r, err := x.Get("t", id)
		return err == nil && r.persisted.Load()
	}
	flushUntil(t, x, "both on disk", func() bool { return stored(ids[0]) && stored(ids[1]) })
	x.Sweep(time.Now())
	check := func(x *Store, i int, when string) {
		t.Helper()
		r, err := x.Get("t", ids[i])
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		res := r.View().Result
		if res == nil || len(res.Outputs) != 3 || res.Text("stdout") != text[i:] || res.Text("stderr") != "warn\n" ||
			res.Outputs[1].Ename != "ValueError" {
			t.Fatalf("%s: the answer read back differs: %d outputs", when, len(res.Outputs))
		}
	}
	check(x, 0, "from disk")
	check(x, 1, "from disk")
	var sizes []int
	if err := x.disk.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketX).ForEach(func(k, v []byte) error {
			if len(v) > 256 {
				t.Errorf("bucket x holds %d bytes for a large record, not a stub", len(v))
			}
			sizes = append(sizes, valueLen(v))
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 2 || bucketKeys(t, x, bucketChunks) != piecesOf(sizes[0])+piecesOf(sizes[1]) {
		t.Fatalf("%d pieces for values of %v bytes", bucketKeys(t, x, bucketChunks), sizes)
	}

	// Written again (a replayed claim does so): its pieces are replaced.
	r, _ := x.Get("t", ids[1])
	if err := x.disk.db.Update(func(tx *bolt.Tx) error {
		_, err := x.disk.putDone(tx, r, &totals{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := bucketKeys(t, x, bucketChunks); got != piecesOf(sizes[0])+piecesOf(sizes[1]) {
		t.Fatalf("after writing a record again: %d pieces", got)
	}

	// The older form: JSON only after the head.
	old, _, _ := x.Claim("t", "old", Key{Language: "python", Code: "1"})
	finishRecord(old, "from an older aiod\n")
	v, err := encodeRec(old, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, rest, _ := decodeHead(v); rest[0] != '{' {
		t.Fatalf("the JSON-only form starts with %q", rest[0])
	}
	if got, err := x.decodeRec(v); err != nil || got.result.Text("stdout") != "from an older aiod\n" {
		t.Fatalf("a JSON-only value: %v", err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}

	y := openTestStore(t, path, Config{CacheBytes: 4096, RetentionBytes: 1 << 20})
	defer y.Close()
	check(y, 0, "after reopening")
	check(y, 1, "after reopening")
	// Past the retention's bytes the oldest go, and their pieces with them.
	for range 4 {
		r, _, _ := y.Claim("t", "", Key{Language: "python", Code: "print(big)"})
		finishRecord(r, text)
	}
	flushUntil(t, y, "the first two swept", func() bool {
		y.Sweep(time.Now())
		_, err0 := y.Get("t", ids[0])
		_, err1 := y.Get("t", ids[1])
		return err0 != nil && err1 != nil
	})
	n := 0
	if err := y.disk.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketX).ForEach(func(k, v []byte) error {
			n += piecesOf(valueLen(v))
			if chunkedLen(v) == 0 {
				n -= piecesOf(len(v)) // a small record, kept whole
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if got := bucketKeys(t, y, bucketChunks); got != n {
		t.Fatalf("%d pieces on disk, %d belong to records", got, n)
	}
}
