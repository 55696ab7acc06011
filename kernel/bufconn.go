package kernel

import (
	"bufio"
	"net"
	"sync/atomic"
)

// zmq4 reads a frame's header and its body with a read each, straight
// from the connection: a Jupyter message of seven frames costs fourteen
// read syscalls, about seventy for the simplest execution. The kernel
// writes a message in one go, so a buffered reader takes it in one or
// two. The busy sockets (shell and iopub) are read through a buffer; the
// socket's reader is the buffer's only user. Writes pass through: a
// sender gathers a message's frames and writes them at once (zsock.go).

// readBuffer is the size of a connection's read buffer: a status message,
// an execute_reply or a short stream fits whole; a larger frame is read
// past the buffer, straight into its slice. Kept small: every live kernel
// holds two (shell and iopub; control, stdin and hb are not buffered).
const readBuffer = 4 << 10

// bufferedConn is a connection read through its buffer; n counts the
// bytes read, as they arrive (a large frame is read straight from the
// connection, in pieces).
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
	n *atomic.Uint64
}

func buffered(c net.Conn, n *atomic.Uint64) net.Conn {
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, readBuffer), n: n}
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}
