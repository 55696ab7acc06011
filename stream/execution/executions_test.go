package execution

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

func outEvent(seq int, text string) Event {
	m := &jupyter.Message{Channel: jupyter.IOPub, Header: jupyter.Header{MsgType: jupyter.MsgStream},
		Content: []byte(`{"name":"stdout","text":"` + text + `"}`)}
	ev := Event{Msg: m, Seq: seq}
	ev.Parse()
	return ev
}

func finishRecord(r *Record, text string) {
	r.Deliver(Event{Result: &Result{Status: StatusOK, Outputs: []*Output{{Type: "stream", Name: "stdout", Text: text}}}})
}

// Claims: a new id runs once; the same id and key attaches; another key is
// a conflict; an evicted id is gone, not unknown.
func TestExecutionsClaim(t *testing.T) {
	x := NewStore(Config{RetentionBytes: 4096, LogBytes: 1 << 20})
	k := Key{Language: "python", SessionID: "s", Code: "print(1)"}
	r, created, err := x.Claim("t", "e1", k)
	if err != nil || !created || r.ID != "e1" {
		t.Fatalf("first claim: %v %v %v", r, created, err)
	}
	if again, created, err := x.Claim("t", "e1", k); err != nil || created || again != r {
		t.Fatalf("second claim: %v %v %v", again, created, err)
	}
	for _, other := range []Key{{"python", "s", "print(2)"}, {"python", "t", "print(1)"}, {"javascript", "s", "print(1)"}} {
		if _, _, err := x.Claim("t", "e1", other); !errors.Is(err, ErrExecutionConflict) {
			t.Errorf("claim with %+v: %v, want a conflict", other, err)
		}
	}
	if fresh, created, _ := x.Claim("t", "", k); !created || fresh.ID == "" || fresh.ID == "e1" {
		t.Errorf("claim without an id: %v %v", fresh.ID, created)
	}
	if _, err := x.Get("t", "nope"); !errors.Is(err, ErrNoExecution) {
		t.Errorf("unknown id: %v", err)
	}
	finishRecord(r, strings.Repeat("x", 8192)) // over the whole bound: evicted at once
	var gone *GoneError
	if _, err := x.Get("t", "e1"); !errors.As(err, &gone) || gone.At.IsZero() || !strings.Contains(gone.Why, "--execution-retention-bytes") {
		t.Fatalf("evicted id: %v", err)
	}
	if _, _, err := x.Claim("t", "e1", k); !errors.As(err, &gone) {
		t.Errorf("a retry of an evicted execution must not run it again: %v", err)
	}
}

// Execution ids are per tenant: the same id names two executions, and
// another tenant's id, held or evicted, is unknown (never a conflict, never
// gone).
func TestExecutionsPerTenant(t *testing.T) {
	x := NewStore(Config{RetentionBytes: 4096, LogBytes: 1 << 20})
	a, created, err := x.Claim("alice", "same", Key{Language: "python", SessionID: "s", Code: "x = 1"})
	if err != nil || !created || a.Tenant != "alice" {
		t.Fatalf("alice's claim: %v %v %v", a, created, err)
	}
	if _, err := x.Get("bob", "same"); !errors.Is(err, ErrNoExecution) {
		t.Fatalf("bob's get of alice's id: %v, want unknown", err)
	}
	b, created, err := x.Claim("bob", "same", Key{Language: "python", SessionID: "s", Code: "print(x)"})
	if err != nil || !created || b == a || b.Tenant != "bob" {
		t.Fatalf("bob's claim of the same id with other code: %v %v %v, want an execution of his own", b, created, err)
	}
	if got, _ := x.Get("alice", "same"); got != a {
		t.Fatal("alice's id names bob's execution")
	}
	finishRecord(a, strings.Repeat("x", 8192)) // evicted at once
	var gone *GoneError
	if _, err := x.Get("alice", "same"); !errors.As(err, &gone) {
		t.Fatalf("alice's evicted id: %v", err)
	}
	if got, err := x.Get("bob", "same"); err != nil || got != b {
		t.Fatalf("bob's id after alice's was evicted: %v %v", got, err)
	}
	if _, err := x.Get("carol", "same"); !errors.Is(err, ErrNoExecution) {
		t.Fatalf("carol's get of an id evicted for alice: %v, want unknown", err)
	}
}

// Finished executions are evicted oldest first, past the byte bound and
// past the retention time; running ones never.
func TestExecutionsEviction(t *testing.T) {
	x := NewStore(Config{Retention: time.Hour, RetentionBytes: 10000, LogBytes: 1 << 20})
	var recs []*Record
	for i := range 5 {
		r, _, _ := x.Claim("t", string(rune('a'+i)), Key{Code: string(rune('a' + i))})
		recs = append(recs, r)
	}
	for _, r := range recs[:4] {
		finishRecord(r, strings.Repeat("y", 3000)) // ~3.5 KB each: three fit
	}
	if st := x.Stats(); st.Finished != 2 || st.Bytes > 10000 || st.Evicted != 2 {
		t.Fatalf("after four finished: %+v", st)
	}
	for i, want := range []bool{false, false, true, true, true} {
		if _, err := x.Get("t", recs[i].ID); (err == nil) != want {
			t.Errorf("record %d held=%v, want %v", i, err == nil, want)
		}
	}
	x.Sweep(time.Now().Add(2 * time.Hour))
	if _, err := x.Get("t", "d"); err == nil {
		t.Error("a record past the retention time was kept")
	}
	if _, err := x.Get("t", "e"); err != nil {
		t.Errorf("the running record was evicted: %v", err)
	}
}

// Follow replays what came after a seq, then goes on live; a cut log says
// where it starts.
func TestRecordFollow(t *testing.T) {
	x := NewStore(Config{LogBytes: 3 * (outEvent(1, "line").Size() + entryOverhead)})
	r, _, _ := x.Claim("t", "f", Key{})
	for i := 1; i <= 2; i++ {
		r.Deliver(outEvent(i, "line"))
	}
	var got []int
	detach, err := r.Follow(1, func(e Entry) {
		if e.Event.Out != nil {
			got = append(got, e.Seq)
		}
		if e.Event.Result != nil {
			got = append(got, -1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 3; i <= 5; i++ {
		r.Deliver(outEvent(i, "line"))
	}
	finishRecord(r, "done")
	detach()
	if want := []int{2, 3, 4, 5, -1}; !equalInts(got, want) {
		t.Fatalf("followed %v, want %v", got, want)
	}
	var gone *GoneError
	if _, err := r.Follow(1, func(Entry) {}); !errors.As(err, &gone) || gone.FirstSeq != 3 {
		t.Fatalf("follow from a dropped seq: %v", err)
	}
	got = nil
	if _, err := r.Follow(2, func(e Entry) { got = append(got, e.Seq) }); err != nil || !equalInts(got, []int{3, 4, 5, 5}) {
		t.Fatalf("follow a finished record from its first held seq: %v %v", got, err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStoreGivesBackABurst: once a burst of executions has expired, the
// store holds no pointer to them (the front of its eviction queue is
// cleared) and its index is made anew, so the heap goes back down.
func TestStoreGivesBackABurst(t *testing.T) {
	x := NewStore(Config{Retention: time.Hour, RetentionBytes: 1 << 30, LogBytes: 1 << 20})
	const n = 3 * shrinkFrom
	for i := range n {
		r, _, err := x.Claim("t", fmt.Sprint("e", i), Key{Code: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		finishRecord(r, "x")
	}
	keep, _, _ := x.Claim("t", "last", Key{Code: "last"})
	finishRecord(keep, "x")
	x.Sweep(time.Now().Add(time.Hour - time.Minute)) // nothing old enough yet
	if st := x.Stats(); st.Held != n+1 {
		t.Fatalf("before the retention: %+v", st)
	}
	// All but the last finished more than the retention ago.
	x.mu.Lock()
	for _, r := range x.finished[:n] {
		r.mu.Lock()
		r.ended = r.ended.Add(-2 * time.Hour)
		r.mu.Unlock()
	}
	x.mu.Unlock()
	x.Sweep(time.Now())
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.byID) != 1 || x.peak != 1 {
		t.Errorf("index holds %d (peak %d), want 1 made anew", len(x.byID), x.peak)
	}
	if len(x.finished) != 1 || cap(x.finished) > 4 {
		t.Errorf("finished: len %d cap %d, want the one record in a small array", len(x.finished), cap(x.finished))
	}
	for i, r := range x.finished[:cap(x.finished)] {
		if r != nil && r != keep {
			t.Errorf("slot %d of the eviction queue still points at an evicted record", i)
		}
	}
}
