package bufconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }

// pair is a connection read through a Conn and its peer, over network.
func pair(t *testing.T, network string) (*Conn, net.Conn, *atomic.Uint64) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	raw, err := net.DialTimeout(network, ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	var n atomic.Uint64
	c := New(raw, &n)
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c, peer, &n
}

// TestConn: small reads come through the buffer, which goes back to the
// pool once drained; a read of Size or more goes straight to the caller;
// every byte is counted; writes go straight through; the peer's close is
// io.EOF; a deadline and a close end a waiting read with net.Conn's
// errors. Both transports.
func TestConn(t *testing.T) {
	t.Parallel()
	for _, network := range []string{"unix", "tcp"} {
		c, peer, n := pair(t, network)
		if c.rc == nil {
			t.Fatalf("%s: no raw connection: reads would not be buffered", network)
		}
		if _, err := peer.Write([]byte("hello, world")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 5)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "hello" {
			t.Fatalf("%s: read %q, %v", network, b, err)
		}
		if c.buf == nil || c.w-c.r != len(", world") {
			t.Fatalf("%s: after a 5-byte read of 12 the buffer holds %d bytes (%v)", network, c.w-c.r, c.buf != nil)
		}
		rest := make([]byte, 7)
		if _, err := io.ReadFull(c, rest); err != nil || string(rest) != ", world" {
			t.Fatalf("%s: read %q, %v", network, rest, err)
		}
		if c.buf != nil {
			t.Fatalf("%s: a drained buffer is still held", network)
		}
		big := strings.Repeat("x", 3*Size)
		go peer.Write([]byte(big)) //nolint:errcheck // read below
		got := make([]byte, len(big))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != big {
			t.Fatalf("%s: large read: %v", network, err)
		}
		if c.buf != nil || n.Load() != uint64(12+len(big)) {
			t.Fatalf("%s: after the large read: buffer held %v, %d bytes counted, want %d", network, c.buf != nil, n.Load(), 12+len(big))
		}
		bufs := net.Buffers{[]byte("ab"), []byte("cd"), []byte("ef")}
		if _, err := bufs.WriteTo(c); err != nil {
			t.Fatal(err)
		}
		echo := make([]byte, 6)
		if _, err := io.ReadFull(peer, echo); err != nil || !bytes.Equal(echo, []byte("abcdef")) {
			t.Fatalf("%s: peer read %q, %v", network, echo, err)
		}

		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: a read past its deadline: %v", network, err)
		}
		c.SetReadDeadline(time.Time{})
		peer.Close()
		if _, err := c.Read(b); err != io.EOF {
			t.Fatalf("%s: the peer's close: %v, want io.EOF", network, err)
		}
	}
	c, _, _ := pair(t, "unix")
	ended := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		ended <- err
	}()
	c.Close()
	if err := <-ended; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a read waiting on a closed connection: %v, want net.ErrClosed", err)
	}
}

// TestCopy: a pipe's bytes reach the writer, in reads of a pooled buffer,
// until the write end closes (nil); a copy waiting on a read end that is
// closed returns an error instead of hanging.
func TestCopy(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- NewPipe(r).Copy(&got) }()
	want := strings.Repeat("output line\n", 2000) // past several buffers
	if _, err := w.WriteString(want); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := <-done; err != nil || got.String() != want {
		t.Fatalf("copy: %v, %d bytes of %d", err, got.Len(), len(want))
	}
	r.Close()

	r, w, err = os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	go func() { done <- NewPipe(r).Copy(io.Discard) }()
	r.Close()
	if err := <-done; err == nil {
		t.Fatal("a copy from a closed read end ended without an error")
	}
}

// gate is a writer that holds each write until it is let go.
type gate struct {
	got     chan string
	release chan struct{}
}

func (g *gate) Write(b []byte) (int, error) {
	g.got <- string(b)
	<-g.release
	return len(b), nil
}

// TestPipeCaughtUp: CaughtUp is false while bytes wait in the pipe or
// while Copy still holds them on their way to the writer, and true once
// they are written and Copy waits for more, though the write end is open
// (as when a dead kernel's children still hold it).
func TestPipeCaughtUp(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	p := NewPipe(r)
	if _, err := w.WriteString("last words\n"); err != nil {
		t.Fatal(err)
	}
	if p.CaughtUp() {
		t.Fatal("caught up before any copy, with bytes in the pipe")
	}
	g := &gate{got: make(chan string), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- p.Copy(g) }()
	for round := range 3 {
		if got := <-g.got; got != "last words\n" {
			t.Fatalf("round %d: the writer got %q", round, got)
		}
		if p.CaughtUp() {
			t.Fatalf("round %d: caught up while the bytes are held on their way to the writer", round)
		}
		g.release <- struct{}{}
		for !p.CaughtUp() {
			<-p.Parked()
		}
		if _, err := w.WriteString("last words\n"); err != nil {
			t.Fatal(err)
		}
		if p.CaughtUp() { // in the pipe, or taken and held: not written yet
			t.Fatalf("round %d: caught up with a write not passed on", round)
		}
	}
	<-g.got
	w.Close()
	g.release <- struct{}{}
	if err := <-done; err != nil || !p.CaughtUp() {
		t.Fatalf("after the end: %v, caught up %v", err, p.CaughtUp())
	}
}
