package gateway

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A local connection whose owner the socket table does not give is
// closed: a failed lookup never lets a runtime through as nobody's. One
// that fails once and then answers is looked up again and kept.
func TestPeerLookupFailsClosed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var fails atomic.Int32 // lookups left to fail
	pl := &peerListener{Listener: ln, peers: &sync.Map{},
		isRuntime: func(uid uint32) bool { return uid == 4242 },
		lookup: func(remote, local *net.TCPAddr) (uint32, error) {
			calls.Add(1)
			if fails.Add(-1) >= 0 {
				return 0, errors.New("netlink: no buffer space")
			}
			return 4242, nil
		}}
	defer pl.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := pl.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	fails.Store(2) // both tries fail: closed
	refused := dial()
	defer refused.Close()
	refused.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := refused.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a connection of unknown owner was kept: read %d, %v", n, err)
	}

	fails.Store(1) // the second try answers: a runtime's connection
	kept := dial()
	defer kept.Close()
	c := <-accepted
	defer c.Close()
	if _, ok := c.(*peerConn); !ok {
		t.Fatalf("accepted %T, want a runtime's peerConn", c)
	}
	if uid, ok := pl.peers.Load(c.RemoteAddr().String()); !ok || uid.(uint32) != 4242 {
		t.Fatalf("peers: %v %v", uid, ok)
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("%d lookups, want 2 for each connection", n)
	}
}
