package kernel

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// countingConn counts the writes that reach the connection.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestZsockTalksToZmq4Peers: a zsock DEALER exchanges multi-frame messages
// (one frame long enough for ZMTP's 8-byte size) with a zmq4 ROUTER, each
// message in a single write; closing the socket ends the reader's recv and
// refuses sends. (The SUB side is what every kernel test's iopub uses;
// zmq4's own PUB leaks a goroutine at Close, so it is no peer here.)
func TestZsockTalksToZmq4Peers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()

	router := zmq4.NewRouter(ctx)
	defer router.Close()
	rpath := filepath.Join(dir, "router")
	if err := router.Listen("ipc://" + rpath); err != nil {
		t.Fatal(err)
	}
	d := newZsock(zmq4.Dealer, "me", new(atomic.Uint64), 10*time.Millisecond, time.Minute)
	defer d.close()
	if err := d.dial(ctx, "unix", rpath); err != nil {
		t.Fatal(err)
	}
	cc := &countingConn{Conn: d.gc.Conn}
	d.gc.Conn = cc
	long := bytes.Repeat([]byte("x"), 300)
	if err := d.send(ctx, nil, [][]byte{{}, []byte("a"), long}); err != nil {
		t.Fatal(err)
	}
	if n := cc.writes.Load(); n != 1 {
		t.Errorf("a three-frame message took %d writes, want 1", n)
	}
	m, err := router.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Frames) != 4 || string(m.Frames[0]) != "me" || len(m.Frames[1]) != 0 || string(m.Frames[2]) != "a" || !bytes.Equal(m.Frames[3], long) {
		t.Fatalf("router got %d frames %q", len(m.Frames), m.Frames)
	}
	if err := router.Send(zmq4.NewMsgFrom([]byte("me"), []byte("x"), []byte("y"))); err != nil {
		t.Fatal(err)
	}
	got, err := d.recv()
	if err != nil || len(got.Frames) != 2 || string(got.Frames[0]) != "x" || string(got.Frames[1]) != "y" {
		t.Fatalf("dealer got %q, %v", got.Frames, err)
	}

	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := d.recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	d.close()
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("recv did not end when the socket closed")
	}
	if err := d.send(ctx, nil, [][]byte{{1}}); err == nil {
		t.Error("a send on a closed socket succeeded")
	}
}

// TestZsockDialRetriesThenGivesUp: a dial to a path nobody listens on yet
// succeeds once the peer binds, and a dial whose context ends fails.
func TestZsockDialRetriesThenGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "late")
	router := zmq4.NewRouter(ctx)
	defer router.Close()
	go func() {
		time.Sleep(100 * time.Millisecond) // the peer binds late: what the dial's retries are for
		_ = router.Listen("ipc://" + path)
	}()
	d := newZsock(zmq4.Dealer, "me", nil, 10*time.Millisecond, time.Minute)
	defer d.close()
	if err := d.dial(ctx, "unix", path); err != nil {
		t.Fatalf("dial to a late listener: %v", err)
	}

	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	never := newZsock(zmq4.Dealer, "me", nil, 10*time.Millisecond, time.Minute)
	defer never.close()
	if err := never.dial(short, "unix", filepath.Join(t.TempDir(), "nobody")); err == nil {
		t.Fatal("a dial to nobody succeeded")
	}
}
