package shell

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
)

// A bash session's commands keep no output of their own: the execution
// store holds it, within its bounds. Ten commands of 4 MB each: a command
// holds its execution only while it runs, each reads its output back
// from the store (which evicts past its bytes), and the offsets go on
// counting.
func TestCommandOutputsAreTheStores(t *testing.T) {
	store := execution.NewStore(execution.Config{RetentionBytes: 10 << 20, LogBytes: 8 << 20})
	ss := &session{}
	chunk := strings.Repeat("x", 64<<10)
	for i := range 10 {
		c := newCommand(fmt.Sprint(i), "flood", "r", "t")
		rec, _, err := store.Claim("t", "", execution.Key{Language: "bash", Code: "flood"})
		if err != nil {
			t.Fatal(err)
		}
		c.attach(store, rec)
		ss.add(c)
		rec.Started(0)
		for seq := 1; seq <= 64; seq++ { // 4 MiB
			m := &jupyter.Message{Channel: jupyter.IOPub, Header: jupyter.Header{MsgType: jupyter.MsgStream},
				Content: []byte(`{"name":"stdout","text":"` + chunk + `"}`)}
			ev := execution.Event{Msg: m, Seq: seq}
			ev.Parse()
			rec.Deliver(ev)
		}
		c.mu.Lock()
		running := c.rec == rec
		c.mu.Unlock()
		if !running {
			t.Fatalf("command %d does not hold its running execution", i)
		}
		res := &execution.Result{Status: execution.StatusOK}
		rec.Deliver(execution.Event{Result: res})
		c.end(res, nil)
	}
	if held := store.Stats().Bytes; held > 10<<20 {
		t.Fatalf("the store holds %d bytes past its bound", held)
	}
	for i, id := range ss.order {
		c := ss.byID[id]
		c.mu.Lock()
		pinned := c.rec != nil
		c.mu.Unlock()
		latest := i == len(ss.order)-1
		if pinned {
			t.Errorf("command %s holds its finished execution", id)
		}
		text, end := c.read(execution.Stdout, 0)
		switch {
		case latest && (len(text) != 4<<20 || end != 4<<20):
			t.Errorf("the latest command reads %d bytes, end %d; want all 4 MiB", len(text), end)
		case !latest && text != "" && len(text) != 4<<20:
			t.Errorf("command %s reads %d bytes: all of it or, evicted, nothing", id, len(text))
		}
		if tail, end := c.read(execution.Stdout, 4<<20-3); latest && (tail != "xxx" || end != 4<<20) {
			t.Errorf("the latest command from its last 3 bytes: %q, end %d", tail, end)
		}
	}
}

// truncateMiddle counts characters, not bytes, and keeps the head and the
// tail whole.
func TestTruncateMiddle(t *testing.T) {
	s := strings.Repeat("é", 100) + strings.Repeat("x", 100) + strings.Repeat("ü", 100)
	got, cut := truncateMiddle(s, 80)
	if !cut || utf8.RuneCountInString(got) != 80 || !strings.HasPrefix(got, "éé") || !strings.HasSuffix(got, "üü") ||
		!strings.Contains(got, "[output truncated]") || !utf8.ValidString(got) {
		t.Fatalf("cut to 80: %q (%d runes)", got, utf8.RuneCountInString(got))
	}
	if got, cut := truncateMiddle(s, 300); cut || got != s {
		t.Fatal("a string within the limit was cut")
	}
	if got, cut := truncateMiddle(s, 10); !cut || got != strings.Repeat("ü", 10) {
		t.Fatalf("too small for the marker: %q", got)
	}
}
