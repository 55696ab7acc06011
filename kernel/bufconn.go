package kernel

import (
	"bufio"
	"net"
)

// zmq4 reads a frame's header and its body with a read each, straight
// from the connection: a Jupyter message of seven frames costs fourteen
// read syscalls, about seventy for the simplest execution. The kernel
// writes a message in one go, so a buffered reader takes it in one or
// two. The busy sockets (shell and iopub) are read through a buffer; the
// socket's reader is the buffer's only user.
// Writes stay as they are: zmq4 sends a message with one writev.

// readBuffer is the size of a connection's read buffer: a status message,
// an execute_reply or a short stream fits whole; a larger frame is read
// past the buffer, straight into its slice. Kept small: every live kernel
// holds two (shell and iopub; control, stdin and hb are not buffered).
const readBuffer = 4 << 10

// buffered puts a read buffer in front of c. The concrete connection is
// embedded, not the interface: zmq4 sends a message with net.Buffers,
// which makes one writev only for net's own connection types (an
// unexported method, kept by embedding).
func buffered(c net.Conn) net.Conn {
	r := bufio.NewReaderSize(c, readBuffer)
	switch c := c.(type) {
	case *net.UnixConn:
		return &bufferedUnix{UnixConn: c, r: r}
	case *net.TCPConn:
		return &bufferedTCPConn{TCPConn: c, r: r}
	}
	return c
}

// bufferedUnix and bufferedTCPConn read through their buffer; everything
// else is the connection's.
type bufferedUnix struct {
	*net.UnixConn
	r *bufio.Reader
}

func (c *bufferedUnix) Read(p []byte) (int, error) { return c.r.Read(p) }

type bufferedTCPConn struct {
	*net.TCPConn
	r *bufio.Reader
}

func (c *bufferedTCPConn) Read(p []byte) (int, error) { return c.r.Read(p) }
