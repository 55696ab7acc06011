package stream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

func TestEndedLogIsBounded(t *testing.T) {
	now := time.Now()
	l := newEndedLog(3, time.Hour)
	for i := 0; i < 5; i++ {
		l.add(sessionKey{"t", "python", fmt.Sprint(i)}, "gone", now)
	}
	if l.Len() != 3 {
		t.Fatalf("%d remembered, want the bound 3", l.Len())
	}
	if _, _, ok := l.take(sessionKey{"t", "python", "1"}, now); ok {
		t.Fatal("an entry past the bound was kept")
	}
	if why, _, ok := l.take(sessionKey{"t", "python", "4"}, now); !ok || why != "gone" {
		t.Fatal("the newest entry was forgotten")
	}
	if _, _, ok := l.take(sessionKey{"t", "python", "4"}, now); ok {
		t.Fatal("an entry was told twice")
	}
	if _, _, ok := l.take(sessionKey{"t", "python", "3"}, now.Add(2*time.Hour)); ok {
		t.Fatal("an entry outlived the TTL")
	}
	if l.Len() != 0 {
		t.Fatalf("%d left after the TTL", l.Len())
	}
}

func TestDecodePayloads(t *testing.T) {
	pages, next := decodePayloads([]byte(`[{"source":"page","data":{"text/plain":"\u001b[31mhelp\u001b[0m","text/html":"<b>h</b>","image/png":"x"},"start":0},` +
		`{"source":"set_next_input","text":"print(1)","replace":false},{"source":"ask_exit","keepkernel":false},{"source":"page","text":"old"}]`))
	if len(pages) != 2 || next != "print(1)" {
		t.Fatalf("pages %d, next %q", len(pages), next)
	}
	if len(pages[0].Data) != 2 || pages[0].Type != jupyter.MsgDisplayData || string(pages[1].Data["text/plain"]) != `"old"` {
		t.Fatalf("pages %+v %+v", pages[0].Data, pages[1].Data)
	}
	c := NewCollector(0)
	c.Add(pages[0])
	c.Add(&Output{Type: jupyter.MsgStream, Name: "stdout", Text: "\x1b[1;31merror\x1b[0m"})
	res := &Result{Outputs: c.Finish()}
	plain := res.Plain()
	if string(plain.Outputs[0].Data["text/plain"]) != `"help"` || plain.Text("stdout") != "error" {
		t.Fatalf("plain page %s, stdout %q", plain.Outputs[0].Data["text/plain"], plain.Text("stdout"))
	}
	if !strings.Contains(string(res.Outputs[0].Data["text/plain"]), `\u001b`) || res.Text("stdout") != "\x1b[1;31merror\x1b[0m" {
		t.Fatal("Plain changed the result it copied")
	}
	if clean := (&Result{Outputs: []*Output{{Type: jupyter.MsgStream, Name: "stdout", Text: "ok"}}}); clean.Plain() != clean {
		t.Fatal("Plain copied a result without escapes")
	}
	for _, raw := range []string{``, `null`, `[]`, `{`, `[{"source":"page","data":{"text/plain":5}}]`} {
		if p, n := decodePayloads([]byte(raw)); len(p) != 0 || n != "" {
			t.Fatalf("payload %q gave %v %q", raw, p, n)
		}
	}
}

// Session.Interrupt records who interrupted the running execution.
func TestFakeInterruptNamesWho(t *testing.T) {
	fs := &fakes{script: hangs}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "i", fs.backend())
	done := make(chan *Result, 1)
	go func() {
		res, _ := sess.Execute(context.Background(), ExecRequest{Code: "loop", Timeout: 10 * time.Second})
		done <- res
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sess.mu.Lock()
		running := sess.cur != nil
		sess.mu.Unlock()
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never ran")
		}
	}
	if err := sess.Interrupt(context.Background(), "a test (unit)"); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Status != StatusError || res.Message() != "execution was interrupted by a test (unit)" || res.InterruptedBy != "a test (unit)" {
		t.Fatalf("interrupted: %s %q by %q", res.Status, res.Message(), res.InterruptedBy)
	}
}
