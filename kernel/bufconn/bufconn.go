// Package bufconn reads through buffers taken from a shared pool only once
// the file is readable, so that a runtime whose readers wait holds none: a
// kernel's connection through a small buffer it borrows while it holds
// bytes not yet read (two 4 KiB buffers per kernel, for a thousand idle
// kernels, were 8 MiB of heap and twice that in the daemon's memory
// between collections), a kernel's output pipe, a native REPL's pipes.
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

// Pool is a pool of read buffers of one size, shared by readers that take
// one only once their file is readable: a reader that waits holds none.
type Pool struct{ p sync.Pool }

// NewPool returns a pool of buffers of size bytes.
func NewPool(size int) *Pool {
	return &Pool{p: sync.Pool{New: func() any { b := make([]byte, size); return &b }}}
}

// pool is the kernels' pool: their connections and their output pipes.
var pool = NewPool(Size)

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
		pool.put(c.buf)
		c.buf = nil
	}
	return n, nil
}

func (c *Conn) fill() error {
	bp, n, err := pool.take(c.rc, nil)
	if err == nil && n > 0 {
		c.buf, c.r, c.w = bp, 0, n
		c.n.Add(uint64(n))
		return nil
	}
	pool.put(bp)
	if err != nil {
		return err
	}
	return io.EOF
}

// Pipe is the read end of a pipe copied through pooled buffers (a
// kernel's stdout and stderr, which with a buffer of its own each idle
// kernel held). It can tell when the copy has caught up with what was
// written to the pipe, which a dead process's last words need: children
// may still hold the write end, so its EOF can be long in coming.
type Pipe struct {
	rc  syscall.RawConn
	err error // from SyscallConn: Copy returns it
	// waiting is true while Copy waits for bytes with all it read passed
	// on, and once it has returned; parked has a token each time it
	// begins to wait.
	waiting atomic.Bool
	parked  chan struct{}
}

// NewPipe returns the pipe whose read end is f.
func NewPipe(f *os.File) *Pipe {
	p := &Pipe{parked: make(chan struct{}, 1)}
	p.rc, p.err = f.SyscallConn()
	return p
}

// Copy copies what the pipe delivers to w until the pipe's end (nil) or
// its close (the error). Only one Copy runs on a Pipe.
func (p *Pipe) Copy(w io.Writer) error {
	defer p.park()
	if p.err != nil {
		return p.err
	}
	write := func(b []byte) { w.Write(b) } //nolint:errcheck // w keeps what it can
	for {
		switch err := pool.read(p.rc, p, write); err {
		case nil:
		case io.EOF:
			return nil
		default:
			return err
		}
	}
}

// CaughtUp reports whether everything written to the pipe so far has
// been passed to Copy's writer: the pipe holds no byte and Copy waits for
// more, or has returned.
func (p *Pipe) CaughtUp() bool {
	if p.err != nil {
		return true
	}
	held := 1
	if err := p.rc.Control(func(fd uintptr) {
		held, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD: the bytes unread
	}); err != nil {
		held = 0 // closed: nothing more will be copied
	}
	// Read the pipe before the copier: bytes it held were taken by a read
	// that cleared waiting first, and waiting is set again only after
	// they were written.
	return held == 0 && p.waiting.Load()
}

// Parked has a value each time Copy begins to wait for bytes (one may be
// stale): a caller waiting for CaughtUp checks again when it comes.
func (p *Pipe) Parked() <-chan struct{} { return p.parked }

func (p *Pipe) park() {
	p.waiting.Store(true)
	select {
	case p.parked <- struct{}{}:
	default:
	}
}

// Read waits until the file behind rc is readable, holding no buffer,
// reads what is there into one of the pool's and passes it to use, which
// must not keep it. It returns io.EOF at the file's end and an error once
// the file is closed (or past its deadline).
func (p *Pool) Read(rc syscall.RawConn, use func([]byte)) error {
	return p.read(rc, nil, use)
}

// read is Read that tells pipe, when not nil, when it waits and when it
// reads (see Pipe.CaughtUp).
func (p *Pool) read(rc syscall.RawConn, pipe *Pipe, use func([]byte)) error {
	bp, n, err := p.take(rc, pipe)
	defer p.put(bp)
	switch {
	case err != nil:
		return err
	case n == 0:
		return io.EOF
	}
	use((*bp)[:n])
	return nil
}

func (p *Pool) put(bp *[]byte) {
	if bp != nil {
		p.p.Put(bp)
	}
}

// take waits until rc is readable, holding no buffer, then reads what is
// there into a buffer of the pool: n bytes, 0 at the end. The buffer,
// when not nil, goes back to the pool by the caller (put). A pipe, when
// not nil, is told when the read waits and when it reads.
func (p *Pool) take(rc syscall.RawConn, pipe *Pipe) (*[]byte, int, error) {
	var (
		n    int
		rerr error
		bp   *[]byte
	)
	err := rc.Read(func(fd uintptr) bool {
		if pipe != nil {
			pipe.waiting.Store(false) // before the read: see CaughtUp
		}
		bp = p.p.Get().(*[]byte)
		for {
			n, rerr = unix.Read(int(fd), *bp)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			p.p.Put(bp) // nothing yet: wait without a buffer
			bp = nil
			if pipe != nil {
				pipe.park()
			}
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
