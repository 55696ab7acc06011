package replbridge

import (
	"errors"
	"io"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestReadPooled: a read waits for the pipe without a buffer, gets what was
// written, sees the end of the pipe as io.EOF, and a reader waiting on a
// read end that is closed returns an error instead of hanging.
func TestReadPooled(t *testing.T) {
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rc, err := rd.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		for {
			if err := readPooled(rc, func(b []byte) { got <- string(b) }); err != nil {
				done <- err
				return
			}
		}
	}()
	for _, s := range []string{"first", "second, larger than the first"} {
		if _, err := wr.WriteString(s); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-got:
			if g != s {
				t.Fatalf("read %q, want %q", g, s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q not read", s)
		}
	}
	wr.Close()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("at the end of the pipe: %v, want io.EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no io.EOF after the write end closed")
	}

	// A reader blocked on an empty pipe returns once its end is closed.
	rd2, wr2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer wr2.Close()
	rc2, _ := rd2.SyscallConn()
	go func() { done <- readPooled(rc2, func([]byte) { t.Error("read from an empty pipe") }) }()
	runtime.Gosched()
	time.Sleep(50 * time.Millisecond) // time for the reader to be waiting when its end closes: the case under test
	rd2.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a closed read end returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the reader hung after its read end was closed")
	}
}
