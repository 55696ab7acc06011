package execution

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func statusEvent(state string) Event { return Event{State: state} }

// A reader pulls the entries in the order the execution sent them
// (statuses between the outputs they came between), a bounded batch at a
// time, then the result once it has had everything; a reader the log left
// behind is told where the log now starts.
func TestPullKeepsOrderAndBounds(t *testing.T) {
	chunk := strings.Repeat("o", 1000)
	one := streamEvent(1, "stdout", chunk).Size()
	x := NewStore(Config{LogBytes: 6 * (one + entryOverhead)})
	r, _, _ := x.Claim("t", "e", Key{Language: "python", Code: "print"})
	r.Started(0)
	kinds := func(es []Entry) string {
		var b strings.Builder
		for _, e := range es {
			switch {
			case e.Event.Out != nil:
				b.WriteString("o")
			case e.Event.State != "":
				b.WriteString(e.Event.State[:1])
			case e.Event.Result != nil:
				b.WriteString("R")
			}
		}
		return b.String()
	}
	cur := NewCursor(0)
	if es, _, final, gone := r.Pull(cur, 10*one); len(es) != 0 || final || gone != nil {
		t.Fatalf("nothing yet: %d entries, final %v, gone %v", len(es), final, gone)
	}
	r.Deliver(statusEvent("busy"))
	for seq := 1; seq <= 4; seq++ {
		r.Deliver(streamEvent(seq, "stdout", chunk))
	}
	es, cur, final, _ := r.Pull(cur, 2*one) // a batch of two outputs
	if got := kinds(es); got != "boo" || final {
		t.Fatalf("first batch %q (final %v), want busy and two outputs", got, final)
	}
	r.Deliver(statusEvent("idle"))
	r.Deliver(Event{Result: &Result{Status: StatusOK}})
	es, cur, final, _ = r.Pull(cur, 10*one)
	if got := kinds(es); got != "ooiR" || !final || cur.Seq != 4 {
		t.Fatalf("the rest %q (final %v, seq %d), want two outputs, idle, the result", got, final, cur.Seq)
	}

	// A reader at seq 1 of an execution whose log dropped seqs 2-4.
	r2, _, _ := x.Claim("t", "f", Key{Language: "python", Code: "flood"})
	r2.Started(0)
	for seq := 1; seq <= 10; seq++ {
		r2.Deliver(streamEvent(seq, "stdout", chunk))
	}
	if _, _, _, gone := r2.Pull(Cursor{Seq: 1}, one); gone == nil || gone.FirstSeq != 5 {
		t.Fatalf("a reader left behind: %v, want the log to start at seq 5", gone)
	}
	if es, _, _, gone := r2.Pull(NewCursor(4), 100*one); gone != nil || len(es) != 6 || es[0].Seq != 5 {
		t.Fatalf("resumed after 4: %d entries from seq %d (%v)", len(es), es[0].Seq, gone)
	}
}

// HeldBytes counts the logs of the running records as they grow, drop
// their oldest outputs and start over after a flood, and lets each go when
// it finishes or fails: the store keeps that sum as it changes.
func TestHeldBytesFollowsRunningLogs(t *testing.T) {
	chunk := strings.Repeat("o", 1000)
	one := streamEvent(1, "stdout", chunk).Size() + entryOverhead
	x := NewStore(Config{LogBytes: 6 * one})
	cached := func() int64 { x.mu.Lock(); defer x.mu.Unlock(); return int64(x.bytes) }
	logs := func(rs ...*Record) int64 {
		var n int64
		for _, r := range rs {
			r.mu.Lock()
			n += int64(r.logBytes)
			r.mu.Unlock()
		}
		return n
	}
	a, _, _ := x.Claim("t", "a", Key{Language: "python", Code: "a"})
	b, _, _ := x.Claim("t", "b", Key{Language: "python", Code: "b"})
	c, _, _ := x.Claim("t", "c", Key{Language: "python", Code: "c"})
	for _, r := range []*Record{a, b, c} {
		r.Started(0)
	}
	check := func(when string, running ...*Record) {
		t.Helper()
		if held, want := x.HeldBytes(), cached()+logs(running...); held != want {
			t.Fatalf("%s: held %d, want the cache's and the running logs', %d", when, held, want)
		}
	}
	for seq := 1; seq <= 3; seq++ {
		a.Deliver(streamEvent(seq, "stdout", chunk))
		b.Deliver(streamEvent(seq, "stdout", chunk))
	}
	check("three outputs each", a, b, c)
	if logs(a, b) != 6*int64(one) {
		t.Fatalf("logs %d, want six outputs' %d", logs(a, b), 6*one)
	}
	for seq := 4; seq <= 10; seq++ { // a's log drops its oldest
		a.Deliver(streamEvent(seq, "stdout", chunk))
	}
	check("a past its bound", a, b, c)
	b.Deliver(streamEvent(4, "stdout", strings.Repeat("f", 7*1000))) // over the whole bound: b's log starts over
	check("b flooded", a, b, c)
	c.Deliver(statusEvent("busy"))
	c.Deliver(streamEvent(1, "stdout", chunk))
	a.Deliver(Event{Result: &Result{Status: StatusOK}})
	check("a finished", b, c)
	b.Fail(errors.New("the session went"))
	check("b failed", c)
	finishRecord(c, "")
	if held := x.HeldBytes(); held != cached() || x.runningLog.Load() != 0 {
		t.Fatalf("all finished: held %d, want the cache's %d (running sum %d)", held, cached(), x.runningLog.Load())
	}
}

// A finished record that leaves the store's memory (on disk, the cache
// full) keeps in its log only what a tracked reader may still pull: none
// when its one reader fell behind the log (that reader is told so, and the
// record's text is then its result's), the outputs after a reader's place
// otherwise, which that reader then pulls to the result.
func TestLeavingMemoryKeepsWhatReadersNeed(t *testing.T) {
	chunk := strings.Repeat("o", 1000)
	one := streamEvent(1, "stdout", chunk).Size() + entryOverhead
	x := openTestStore(t, filepath.Join(t.TempDir(), "executions.db"), Config{CacheBytes: 4096, LogBytes: 6 * one})
	defer x.Close()
	flood := func(id string) *Record {
		r, _, _ := x.Claim("t", id, Key{Language: "python", Code: "flood"})
		r.Started(0)
		for seq := 1; seq <= 10; seq++ {
			r.Deliver(streamEvent(seq, "stdout", chunk))
		}
		return r
	}
	behind, ahead := flood("behind"), flood("ahead")
	slow, fast := Cursor{Seq: 1}, Cursor{Seq: 7}
	untrackSlow, untrackFast := behind.Track(&slow), ahead.Track(&fast)
	defer untrackSlow()
	defer untrackFast()
	finishRecord(behind, "the result's text")
	finishRecord(ahead, "")
	flushUntil(t, x, "both on disk", func() bool { return behind.persisted.Load() && ahead.persisted.Load() })
	for i := range 8 { // pushes both out of the cache
		o, _, _ := x.Claim("t", "", Key{Language: "python", Code: "x"})
		finishRecord(o, strings.Repeat("y", 1000+i))
	}
	x.Sweep(time.Now())
	if _, err := x.Get("t", "behind"); err != nil {
		t.Fatal(err)
	}
	behind.mu.Lock()
	kept, left := len(behind.entries), behind.logLeft
	behind.mu.Unlock()
	if kept != 0 || !left {
		t.Fatalf("behind's record out of memory keeps %d outputs (log let go: %v), want none", kept, left)
	}
	if _, _, _, gone := behind.Pull(slow, 100*one); gone == nil {
		t.Fatalf("the reader left behind pulled without being told")
	}
	if text, _, ok := behind.StreamFrom(Stdout, 0); !ok || text != "the result's text" {
		t.Fatalf("behind's text after its log went: %q %v", text, ok)
	}
	es, _, final, gone := ahead.Pull(fast, 100*one)
	if gone != nil || !final || len(es) != 4 || es[0].Seq != 8 || es[3].Event.Result == nil {
		t.Fatalf("the reader at seq 7: %d entries, final %v, gone %v; want 8-10 and the result", len(es), final, gone)
	}
	ahead.mu.Lock()
	kept = len(ahead.entries)
	ahead.mu.Unlock()
	if kept != 3 {
		t.Fatalf("ahead's record out of memory keeps %d outputs, want the 3 its reader had not had", kept)
	}
	// What the two hold out of memory counts as held (the daemon's soft
	// memory limit), until their readers go.
	cached := func() int64 { x.mu.Lock(); defer x.mu.Unlock(); return int64(x.bytes) }
	if held, want := x.HeldBytes(), cached()+int64(behind.heldBytes()+ahead.heldBytes()); held != want {
		t.Errorf("held with two records out of memory and read: %d, want the cache's and theirs, %d", held, want)
	}
	untrackSlow()
	if held, want := x.HeldBytes(), cached()+int64(ahead.heldBytes()); held != want {
		t.Errorf("held once behind's reader went: %d, want %d", held, want)
	}
	untrackFast()
	if held, want := x.HeldBytes(), cached(); held != want {
		t.Errorf("held once both readers went: %d, want the cache's %d", held, want)
	}
}
