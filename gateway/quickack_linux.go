package gateway

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
)

// quickAckListener hands out connections that acknowledge a request's
// first bytes at once when the rest of it is still to come.
//
// Why: a client that writes a request's headers and its body in two
// sends with Nagle on (httpx 0.23, which the agent_sandbox SDK runs on)
// holds the body until the headers are acknowledged, and on a kept-alive
// connection Linux delays that ACK by up to 40 ms, expecting to carry it
// on the answer. Setting TCP_QUICKACK when an ACK is pending sends it
// now.
//
// When: only when a read is about to wait while what was read before has
// not been answered: the request (or a WebSocket's message) is not all
// there yet. A request that comes in one piece is answered with its ACK
// riding on the answer, as Linux intends: arming TCP_QUICKACK after every
// read sent one more segment per call (about 10 µs of aiod's CPU on this
// machine, on the request's path). Measured in TestTwoWriteClientNoStall
// and bench/README.md.
type quickAckListener struct{ net.Listener }

func (l quickAckListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	return &quickAckConn{TCPConn: tc, rc: rc}, nil
}

// quickAckConn embeds the *net.TCPConn so that everything but Read and
// Write (and the io.ReaderFrom/WriterTo fast paths) is the connection's
// own.
type quickAckConn struct {
	*net.TCPConn
	rc syscall.RawConn

	// unanswered: bytes were read since aiod last wrote. A WebSocket's
	// reader and its writers run on different goroutines.
	unanswered atomic.Bool
}

// Read reads like the connection's own Read (the read deadline holds: the
// runtime's poller waits), and arms TCP_QUICKACK before it waits for more
// of an unanswered request.
func (c *quickAckConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return c.TCPConn.Read(p)
	}
	var n int
	var rerr error
	armed := false
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), p)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr != syscall.EAGAIN {
			return true
		}
		if !armed && c.unanswered.Load() {
			armed = true
			_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
		}
		return false // wait until readable, then read again
	})
	switch {
	case err != nil: // the deadline passed or the connection closed
		return 0, err
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case n == 0:
		return 0, io.EOF
	}
	c.unanswered.Store(true)
	return n, nil
}

// Write is the connection's own; whatever aiod writes answers what was
// read (and carries its ACK).
func (c *quickAckConn) Write(p []byte) (int, error) {
	c.unanswered.Store(false)
	return c.TCPConn.Write(p)
}
