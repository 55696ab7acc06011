package execution

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

func iopub(t testing.TB, typ string, content any) *jupyter.Message {
	t.Helper()
	b, err := json.Marshal(content)
	if err != nil {
		t.Fatal(err)
	}
	return &jupyter.Message{Channel: "iopub", Header: jupyter.Header{MsgType: typ}, Content: b}
}

func streamMsg(t testing.TB, name, text string) *jupyter.Message {
	return iopub(t, "stream", map[string]string{"name": name, "text": text})
}

// add decodes m as the mux does and folds it.
func add(t testing.TB, c *Collector, m *jupyter.Message) {
	t.Helper()
	o, ok := Decode(m)
	if !ok {
		t.Fatalf("%s carries no output", m.Header.MsgType)
	}
	c.Add(o)
}

func TestCollectorMergesConsecutiveStreams(t *testing.T) {
	c := NewCollector(0)
	add(t, c, streamMsg(t, "stdout", "a\n"))
	add(t, c, streamMsg(t, "stdout", "b\n"))
	add(t, c, streamMsg(t, "stderr", "warn\n"))
	add(t, c, streamMsg(t, "stdout", "c\n"))
	out := c.Finish()
	got := []string{}
	for _, o := range out {
		got = append(got, o.Name+":"+o.Text)
	}
	want := []string{"stdout:a\nb\n", "stderr:warn\n", "stdout:c\n"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outputs = %q, want %q", got, want)
	}
}

// Output that arrives once the answer was assembled (an interrupted loop's
// last print, racing the timeout's answer) is dropped: it neither changes
// the outputs handed out nor panics on a stream already turned to text.
func TestCollectorAfterFinish(t *testing.T) {
	c := NewCollector(0)
	add(t, c, streamMsg(t, "stdout", "a\n"))
	out := c.Finish()
	add(t, c, streamMsg(t, "stdout", "late\n"))
	add(t, c, iopub(t, "clear_output", map[string]bool{"wait": false}))
	if len(out) != 1 || out[0].Text != "a\n" {
		t.Fatalf("outputs after a late stream = %+v, want stdout a only", out)
	}
	if again := c.Finish(); len(again) != 1 || again[0].Text != "a\n" {
		t.Fatalf("second Finish = %+v", again)
	}
}

func TestCollectorClearOutputAndUpdateDisplay(t *testing.T) {
	c := NewCollector(0)
	add(t, c, streamMsg(t, "stdout", "old\n"))
	add(t, c, iopub(t, "clear_output", map[string]bool{"wait": false}))
	add(t, c, streamMsg(t, "stdout", "kept\n"))
	add(t, c, iopub(t, "clear_output", map[string]bool{"wait": true}))
	if n := len(c.outputs); n != 1 {
		t.Fatalf("clear_output(wait=True) cleared at once: %d outputs", n)
	}
	add(t, c, iopub(t, "display_data", map[string]any{
		"data": map[string]string{"text/plain": "v1"}, "metadata": map[string]any{},
		"transient": map[string]string{"display_id": "d1"},
	}))
	add(t, c, iopub(t, "update_display_data", map[string]any{
		"data": map[string]string{"text/plain": "v2"}, "metadata": map[string]any{},
		"transient": map[string]string{"display_id": "d1"},
	}))
	out := c.Finish()
	if len(out) != 1 || out[0].Type != "display_data" || string(out[0].Data["text/plain"]) != `"v2"` {
		b, _ := json.Marshal(out)
		t.Fatalf("outputs = %s, want one display_data holding v2", b)
	}
}

func TestCollectorStripsANSIFromTracebacks(t *testing.T) {
	c := NewCollector(0)
	add(t, c, iopub(t, "error", map[string]any{
		"ename": "ZeroDivisionError", "evalue": "division by zero",
		"traceback": []string{"\x1b[0;31m-----\x1b[0m", "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"},
	}))
	out := c.Finish()
	if got := out[0].Traceback; got[0] != "-----" || got[1] != "ZeroDivisionError: division by zero" {
		t.Fatalf("traceback = %q", got)
	}
}

func TestCollectorBudgetKeepsHeadAndTail(t *testing.T) {
	const budget = 64 << 10
	c := NewCollector(budget)
	chunk := strings.Repeat("x", 1000) + "\n"
	add(t, c, streamMsg(t, "stdout", "HEAD\n"))
	for i := 0; i < 2000; i++ { // ~2 MB, 30 x the budget
		add(t, c, streamMsg(t, "stdout", chunk))
	}
	add(t, c, streamMsg(t, "stdout", "TAIL\n"))
	if !c.Truncated() || c.Note() == "" {
		t.Fatal("collector did not report truncation")
	}
	out := c.Finish()
	total := 0
	for _, o := range out {
		total += len(o.Text)
	}
	// The answer carries the text twice: the budget, the tail and the notes.
	if streamWeight*total > budget+streamWeight*tailSize(budget)+1024 {
		t.Fatalf("kept %d bytes (counted twice) for a %d budget", total, budget)
	}
	first, last := out[0], out[len(out)-1]
	if !strings.HasPrefix(first.Text, "HEAD\n") || !first.Truncated {
		t.Fatalf("head output: truncated=%v prefix %q", first.Truncated, first.Text[:10])
	}
	if !strings.HasSuffix(last.Text, "TAIL\n") || !strings.Contains(last.Text, "omitted") {
		t.Fatalf("tail output lacks the tail or the note: %q", last.Text[:200])
	}
}

func TestCollectorBudgetOmitsLargeRichOutput(t *testing.T) {
	c := NewCollector(1024)
	add(t, c, iopub(t, "display_data", map[string]any{"data": map[string]string{"image/png": strings.Repeat("A", 4096)}}))
	out := c.Finish()
	if _, ok := out[0].Data["image/png"]; ok || !out[0].Truncated {
		t.Fatalf("rich output over the budget was kept: %+v", out[0])
	}
}

func TestTailRingUTF8Boundary(t *testing.T) {
	r := newTailRing(5)
	r.write([]byte("aé")) // 3 bytes
	r.write([]byte("€€")) // 6 bytes; the last 5 bytes cut into the first €
	tail, dropped := r.finish()
	if tail != "€" || dropped != 6 {
		t.Fatalf("tail = %q dropped = %d", tail, dropped)
	}
}

func TestOutputSerialisations(t *testing.T) {
	n := 2
	o := &Output{Type: "execute_result", Data: map[string]json.RawMessage{"text/plain": json.RawMessage(`"6"`)}, ExecutionCount: &n}
	b, _ := json.Marshal(o.Compact())
	if string(b) != `{"output_type":"execute_result","data":{"text/plain":"6"},"metadata":{},"execution_count":2}` {
		t.Fatalf("compact = %s", b)
	}
	s := &Output{Type: "stream", Name: "stdout", Text: "6\n"}
	b, _ = json.Marshal(s.NineField())
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if len(m) != 9 || m["text"] != "6\n" || m["data"] != nil || m["traceback"] != nil {
		t.Fatalf("nine-field = %s", b)
	}
}

// A stream's text past a MiB goes into one buffer of the most the budget
// leaves it: handed over as it is when at least half full, copied to its
// size when not; either way the text is what was printed.
func TestCollectorLargeStreamText(t *testing.T) {
	chunk := strings.Repeat("0123456789abcdé\n", 4096) // 64 KiB and a multi-byte rune each
	for _, tc := range []struct {
		name   string
		chunks int
		budget int
	}{
		{"over the budget", 80, 8 << 20},
		{"three quarters of the head", 48, 8 << 20},
		{"a fifth of the head", 20, 16 << 20},
		{"under a MiB", 10, 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCollector(tc.budget)
			var want strings.Builder
			for range tc.chunks {
				add(t, c, streamMsg(t, "stdout", chunk))
				want.WriteString(chunk)
			}
			// Held counts the text once and the tail's ring: what the
			// daemon's soft memory limit does not double.
			head := tc.budget / streamWeight
			held := min(want.Len(), head)
			if want.Len() > head {
				held += tailSize(tc.budget)
			}
			if c.Held() < held-4 || c.Held() > held { // the head ends on a whole rune
				t.Errorf("Held() = %d with %d bytes printed, want about %d", c.Held(), want.Len(), held)
			}
			out := c.Finish()
			if want.Len() > head {
				if !c.Truncated() || len(out) != 2 || len(out[0].Text) > head || !strings.HasPrefix(want.String(), out[0].Text) ||
					!strings.HasSuffix(out[1].Text, strings.Repeat("0123456789abcdé\n", 16)) {
					t.Fatalf("%d outputs, the head of %d bytes (at most %d)", len(out), len(out[0].Text), head)
				}
				return
			}
			if c.Truncated() || len(out) != 1 || out[0].Text != want.String() {
				t.Fatalf("%d outputs, %d bytes of %d printed", len(out), len(out[0].Text), want.Len())
			}
		})
	}
}

// BenchmarkCollectorFlood folds a 12 MiB stream arriving in 1 MiB messages
// (as a forked kernel sends a flood) into the default 8 MiB budget.
func BenchmarkCollectorFlood(b *testing.B) {
	msgs := make([]*jupyter.Message, 12)
	line := strings.Repeat("y", 1023) + "\n"
	for i := range msgs {
		msgs[i] = streamMsg(b, "stdout", strings.Repeat(line, 1024))
	}
	b.SetBytes(12 << 20)
	b.ReportAllocs()
	for b.Loop() {
		c := NewCollector(0)
		for _, m := range msgs {
			add(b, c, m)
		}
		if out := c.Finish(); len(out) != 2 || len(out[0].Text) != DefaultBudget/streamWeight {
			b.Fatalf("%d outputs, the first of %d bytes", len(out), len(out[0].Text))
		}
	}
}
