package execution

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

func streamEvent(seq int, name, text string) Event {
	m := &jupyter.Message{Channel: jupyter.IOPub, Header: jupyter.Header{MsgType: jupyter.MsgStream},
		Content: []byte(`{"name":"` + name + `","text":"` + text + `"}`)}
	ev := Event{Msg: m, Seq: seq}
	ev.Parse()
	return ev
}

// A record reads its stdout and stderr by byte offsets that count every
// byte sent: once its log drops the oldest outputs, the text starts at the
// oldest byte held and the offsets go on where they were.
func TestStreamFromCountsWhatTheLogDropped(t *testing.T) {
	chunk := strings.Repeat("o", 1000)
	one := streamEvent(1, "stdout", chunk).Size() + entryOverhead
	x := NewStore(Config{LogBytes: 4 * one})
	r, _, err := x.Claim("t", "e", Key{Language: "bash", Code: "flood"})
	if err != nil {
		t.Fatal(err)
	}
	r.Started(0)
	if text, end, ok := r.StreamFrom(Stdout, 0); text != "" || end != 0 || !ok {
		t.Fatalf("before any output: %q %d %v", text, end, ok)
	}
	seq := 0
	var all strings.Builder
	for i := range 10 { // stdout, stdout, stderr, ...: 7 of one, 3 of the other
		name, c := "stdout", chunk
		if i%3 == 2 {
			name, c = "stderr", strings.Repeat("e", 1000)
		}
		seq++
		r.Deliver(streamEvent(seq, name, c))
		all.WriteString(c)
	}
	out, end, _ := r.StreamFrom(Stdout, 0)
	if end != 7000 || out != strings.Repeat("o", len(out)) || len(out) >= 7000 || len(out) == 0 {
		t.Fatalf("stdout from 0: %d bytes, end %d (want the held tail and 7000)", len(out), end)
	}
	if tail, end2, _ := r.StreamFrom(Stdout, 6500); tail != strings.Repeat("o", 500) || end2 != 7000 {
		t.Fatalf("stdout from 6500: %d bytes, end %d", len(tail), end2)
	}
	if _, eend, _ := r.StreamFrom(Stderr, 0); eend != 3000 {
		t.Fatalf("stderr ends at %d, want 3000", eend)
	}
	both, bend, _ := r.StreamFrom(AllStreams, 0)
	if bend != 10000 || !strings.HasSuffix(all.String(), both) || len(both) != 4000 {
		t.Fatalf("both streams: %d bytes, end %d; want the last 4000 of 10000 in order", len(both), bend)
	}
	if past, pend, _ := r.StreamFrom(Stdout, 9000); past != "" || pend != 7000 {
		t.Fatalf("stdout past its end: %q, end %d", past, pend)
	}
}

// A finished execution read back from the store's file reads its result's
// stream text; an evicted one says it holds nothing.
func TestStreamFromAfterTheLog(t *testing.T) {
	x := openTestStore(t, filepath.Join(t.TempDir(), "executions.db"), Config{CacheBytes: 1})
	defer x.Close()
	r, _, err := x.Claim("t", "e", Key{Language: "bash", Code: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	r.Started(0)
	r.Deliver(streamEvent(1, "stdout", "hello\n"))
	r.Deliver(Event{Result: &Result{Status: StatusOK, Outputs: []*Output{
		{Type: "stream", Name: "stdout", Text: "hello\n"}, {Type: "stream", Name: "stderr", Text: "warn\n"}}}})
	var back *Record
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		x.Sweep(time.Now())
		if got, err := x.Get("t", "e"); err == nil && got != r {
			back = got
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the execution never left the cache for the file")
		}
	}
	if text, end, ok := back.StreamFrom(Stderr, 0); text != "warn\n" || end != 5 || !ok {
		t.Fatalf("stderr read back: %q %d %v", text, end, ok)
	}
	if text, _, _ := back.StreamFrom(AllStreams, 3); text != "lo\nwarn\n" {
		t.Fatalf("both from 3, read back: %q", text)
	}

	mem := NewStore(Config{Retention: time.Millisecond, LogBytes: 1 << 20})
	gone, _, _ := mem.Claim("t", "g", Key{Language: "bash", Code: "echo"})
	gone.Started(0)
	gone.Deliver(streamEvent(1, "stdout", "bye\n"))
	finishRecord(gone, "bye\n")
	mem.Sweep(time.Now().Add(time.Second))
	if text, end, ok := gone.StreamFrom(Stdout, 2); text != "" || end != 2 || ok {
		t.Fatalf("an evicted execution: %q %d %v", text, end, ok)
	}
}
