package gateway

import (
	"net"
	"syscall"
)

// quickAckListener hands out connections that acknowledge what they read
// at once (TCP_QUICKACK re-armed after every read: Linux clears it by
// itself after a few segments).
//
// Why: a client that writes a request's headers and its body in two
// sends with Nagle on (httpx 0.23, which the agent_sandbox SDK runs on)
// holds the body until the headers are acknowledged, and on a kept-alive
// connection Linux delays that ACK by up to 40 ms, expecting to carry it
// on the answer. Setting TCP_QUICKACK when an ACK is pending sends it
// now. One setsockopt per read; measured in TestTwoWriteClientNoStall
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

// quickAckConn embeds the *net.TCPConn so that everything but Read (and
// the io.ReaderFrom/WriterTo fast paths) is the connection's own.
type quickAckConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	if n > 0 {
		_ = c.rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
		})
	}
	return n, err
}
