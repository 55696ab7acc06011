package kernel

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestBufferedConn: a buffered connection reads through its buffer and
// writes straight through, for both transports.
func TestBufferedConn(t *testing.T) {
	t.Parallel()
	for _, network := range []string{"unix", "tcp"} {
		addr := "127.0.0.1:0"
		if network == "unix" {
			addr = filepath.Join(t.TempDir(), "s")
		}
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan []byte, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- nil
				return
			}
			defer c.Close()
			_, _ = c.Write([]byte("hello"))
			b, _ := io.ReadAll(io.LimitReader(c, 6))
			got <- b
		}()
		raw, err := net.DialTimeout(network, ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var n atomic.Uint64
		c := buffered(raw, &n)
		b := make([]byte, 5)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "hello" {
			t.Errorf("%s: read %q, %v", network, b, err)
		}
		bufs := net.Buffers{[]byte("ab"), []byte("cd"), []byte("ef")}
		if _, err := bufs.WriteTo(c); err != nil {
			t.Fatal(err)
		}
		if b := <-got; !bytes.Equal(b, []byte("abcdef")) {
			t.Errorf("%s: peer read %q", network, b)
		}
		c.Close()
		ln.Close()
	}
}
