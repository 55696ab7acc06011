// Package bufconn reads a kernel's connection through a small buffer that
// the connection borrows from a shared pool only while it holds bytes not
// yet read: an idle kernel, whose reader waits for the next message, holds
// none (two 4 KiB buffers each, for a thousand idle kernels, were 8 MiB of
// heap and twice that in the daemon's memory between collections).
//
// zmq4 reads a frame's header and its body with a read each, straight from
// the connection: a Jupyter message of seven frames costs fourteen read
// syscalls, about seventy for the simplest execution. The kernel writes a
// message in one go, so a buffered read takes it in one or two.
package bufconn

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Size is a buffer's size: a status message, an execute_reply or a short
// stream fits whole; a larger frame is read past the buffer, straight
// into its slice.
const Size = 4 << 10

var pool = sync.Pool{New: func() any { b := make([]byte, Size); return &b }}

// Conn is a connection read through a pooled buffer; its one reader calls
// Read (it is not safe for two). Writes pass through.
type Conn struct {
	net.Conn
	rc   syscall.RawConn // nil: read through Conn's own Read, unbuffered
	n    *atomic.Uint64  // counts the bytes read, as they arrive
	buf  *[]byte         // borrowed while it holds [r:w]; nil when empty
	r, w int
}

// New returns c read through a pooled buffer, counting into n. A
// connection that is not a socket of the operating system (no
// SyscallConn) is read unbuffered.
func New(c net.Conn, n *atomic.Uint64) *Conn {
	cb := &Conn{Conn: c, n: n}
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			cb.rc = rc
		}
	}
	return cb
}

// Read hands out what the buffer holds, or waits until the connection is
// readable (holding no buffer) and reads what is there into a pooled one;
// a read of Size or more goes straight into p. The end of the connection
// is io.EOF; a closed connection or a passed deadline is the error
// net.Conn's Read would give.
func (c *Conn) Read(p []byte) (int, error) {
	if c.buf == nil {
		if c.rc == nil || len(p) >= Size {
			n, err := c.Conn.Read(p)
			c.n.Add(uint64(n))
			return n, err
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, (*c.buf)[c.r:c.w])
	if c.r += n; c.r == c.w {
		pool.Put(c.buf)
		c.buf = nil
	}
	return n, nil
}

func (c *Conn) fill() error {
	bp, n, err := read(c.rc)
	if err == nil && n > 0 {
		c.buf, c.r, c.w = bp, 0, n
		c.n.Add(uint64(n))
		return nil
	}
	if bp != nil {
		pool.Put(bp)
	}
	if err != nil {
		return err
	}
	return io.EOF
}

// Copy copies what the file behind rc (a pipe) delivers to w, each read
// into a pooled buffer taken once the pipe is readable, until the pipe's
// end (nil) or its close (the error). A kernel's stdout and stderr go to
// aiod through such a pipe: with a buffer of its own, each idle kernel held one.
func Copy(w io.Writer, rc syscall.RawConn) error {
	for {
		bp, n, err := read(rc)
		if n > 0 {
			w.Write((*bp)[:n]) //nolint:errcheck // w keeps what it can
		}
		if bp != nil {
			pool.Put(bp)
		}
		switch {
		case err != nil:
			return err
		case n == 0:
			return nil
		}
	}
}

// read waits until rc is readable, holding no buffer, then reads what is
// there into a pooled buffer: n bytes, 0 at the end. The buffer, when not
// nil, goes back to the pool by the caller.
func read(rc syscall.RawConn) (*[]byte, int, error) {
	var (
		n    int
		rerr error
		bp   *[]byte
	)
	err := rc.Read(func(fd uintptr) bool {
		bp = pool.Get().(*[]byte)
		for {
			n, rerr = unix.Read(int(fd), *bp)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			pool.Put(bp) // nothing yet: wait without a buffer
			bp = nil
			return false
		}
		return true
	})
	switch {
	case err != nil: // closed, or past the deadline: already a *net.OpError or *os.PathError
		return bp, 0, err
	case rerr != nil:
		return bp, 0, &net.OpError{Op: "read", Err: os.NewSyscallError("read", rerr)}
	}
	return bp, n, nil
}
