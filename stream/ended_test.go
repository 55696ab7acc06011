package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aiod/aiod/stream/execution"
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

// Session.Interrupt records who interrupted the running execution.
func TestFakeInterruptNamesWho(t *testing.T) {
	fs := &fakes{script: hangs}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "i", fs.backend())
	done := make(chan *execution.Result, 1)
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
	if res.Status != execution.StatusError || res.Message() != "execution was interrupted by a test (unit)" || res.InterruptedBy != "a test (unit)" {
		t.Fatalf("interrupted: %s %q by %q", res.Status, res.Message(), res.InterruptedBy)
	}
}
