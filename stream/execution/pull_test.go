package execution

import (
	"strings"
	"testing"
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
