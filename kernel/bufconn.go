package kernel

import (
	"bufio"
	"context"
	"net"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// zmq4 reads a frame's header and its body with a read each, straight
// from the connection: a Jupyter message of seven frames costs fourteen
// read syscalls, about seventy for the simplest execution. The kernel
// writes a message in one go, so a buffered reader takes it in one or
// two. aiod dials its kernels' busy sockets through these two
// transports, zmq4's own ipc and tcp with a buffer in front of every
// connection's reads (zmq4 has one reader goroutine per connection, so
// the buffer has one owner).
// Writes stay as they are: zmq4 sends a message with one writev.
const (
	bufferedIPC = "aiod-ipc"
	bufferedTCP = "aiod-tcp"
)

// readBuffer is the size of a connection's read buffer: a status message,
// an execute_reply or a short stream fits whole; a larger frame is read
// past the buffer, straight into its slice. Kept small: every live kernel
// holds two (shell and iopub; control, stdin and hb are not buffered).
const readBuffer = 4 << 10

func init() {
	for name, network := range map[string]string{bufferedIPC: "unix", bufferedTCP: "tcp"} {
		if err := zmq4.RegisterTransport(name, bufferedTransport{transport.New(network)}); err != nil {
			panic(err) // a name taken twice is a programming error
		}
	}
}

type bufferedTransport struct{ transport.Transport }

func (t bufferedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.Transport.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(c, readBuffer)
	// The concrete connection is embedded, not the interface: zmq4 sends
	// a message with net.Buffers, which makes one writev only for net's
	// own connection types (an unexported method, kept by embedding).
	switch c := c.(type) {
	case *net.UnixConn:
		return &bufferedUnix{UnixConn: c, r: r}, nil
	case *net.TCPConn:
		return &bufferedTCPConn{TCPConn: c, r: r}, nil
	}
	return c, nil
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
