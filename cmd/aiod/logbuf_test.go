package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuf is a bytes.Buffer safe for the flush timer's goroutine.
type lockedBuf struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	return l.b.Write(p)
}

func (l *lockedBuf) snapshot() (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String(), l.writes
}

// TestLineBufferBatches: lines written together reach the writer in one
// write, within the flush interval, whole and in order; Close writes the
// rest; a burst past maxBuffered is written at once.
func TestLineBufferBatches(t *testing.T) {
	t.Parallel()
	out := &lockedBuf{}
	// An interval long enough that the 50 writes are all in before it,
	// even on a loaded machine (20 ms was not, beside a go test loop).
	b := newLineBuffer(out, time.Second)
	var want strings.Builder
	for i := range 50 {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		if _, err := b.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := out.snapshot(); got != "" {
		t.Fatalf("written before the interval: %q", got)
	}
	deadline := time.Now().Add(30 * time.Second) // a 1 s interval, on a machine that may be loaded
	for {
		got, writes := out.snapshot()
		if got == want.String() {
			if writes != 1 {
				t.Fatalf("50 lines took %d writes, want 1", writes)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the writer has %q", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A second batch, then Close: written at once.
	if _, err := b.Write([]byte("last\n")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := out.snapshot(); !strings.HasSuffix(got, "line 49\nlast\n") {
		t.Fatalf("Close did not write the rest: %q", got[max(0, len(got)-40):])
	}
	// After Close, straight through.
	if _, err := b.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := out.snapshot(); !strings.HasSuffix(got, "after\n") {
		t.Fatal("a write after Close was kept")
	}

	// A burst past the bound is written by the writer that crosses it.
	big := &lockedBuf{}
	bb := newLineBuffer(big, time.Hour)
	defer bb.Close() //nolint:errcheck
	line := []byte(strings.Repeat("x", 1023) + "\n")
	for range maxBuffered / len(line) {
		if _, err := bb.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if got, writes := big.snapshot(); len(got) != maxBuffered || writes != 1 {
		t.Fatalf("%d bytes in %d writes after a %d-byte burst, want one write of all", len(got), writes, maxBuffered)
	}
}
