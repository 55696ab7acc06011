package kernel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"

	"github.com/aiod/aiod/kernel/bufconn"
)

// errSocketClosed is what a send or a dial finds on a closed socket.
var errSocketClosed = errors.New("socket closed")

// zsock is aiod's end of one kernel socket: a single ZMTP connection that
// aiod dials itself and speaks through zmq4's protocol code (zmq4.Open:
// the greeting, the NULL handshake, the framing). A zmq4 socket puts a
// goroutine and a queue between a connection and its reader, starts a
// goroutine for every message it sends and keeps a reaper goroutine per
// socket: that is for sockets with many peers that come and go. A kernel
// socket has one peer and is never redialled (a kernel whose connection
// ends is gone), so the channel's reader reads the connection itself and
// a sender writes it in turn, on its own goroutine.
//
// zmq4 answers a ZMTP PING inside its read, unlocked against a send; a
// peer of ZMTP 3.0 (what zmq4 greets with) sends no PING, and ipykernel
// sets no heartbeat on its sockets.
type zsock struct {
	typ      zmq4.SocketType
	id       zmq4.SocketIdentity
	received *atomic.Uint64 // non-nil: read through a pooled buffer (package bufconn), counting the bytes
	retry    time.Duration  // pause between dial attempts
	timeout  time.Duration  // bound of one message's write (Options.SendTimeout)
	turn     chan struct{}  // held by the one sender writing (1 slot)

	mu     sync.Mutex // guards nc and closed; zc and gc are set once, before the reader starts
	nc     net.Conn
	gc     *gatherConn
	zc     *zmq4.Conn
	closed bool
}

// gatherConn is the connection zmq4 reads and writes. A zmq4.Conn writes
// a message's frames with two writes each (header, body) unless the
// message comes through one of zmq4's own sockets; while a sender gathers,
// those writes land in buf, which the sender then writes in one go.
type gatherConn struct {
	net.Conn
	gather bool   // set and cleared by the sender holding the turn
	buf    []byte // the message being gathered
}

func (g *gatherConn) Write(p []byte) (int, error) {
	if g.gather {
		g.buf = append(g.buf, p...)
		return len(p), nil
	}
	return g.Conn.Write(p)
}

// keepGathered is the largest buffer a socket keeps between messages.
const keepGathered = 64 << 10

func newZsock(typ zmq4.SocketType, id string, received *atomic.Uint64, retry, timeout time.Duration) *zsock {
	return &zsock{typ: typ, id: zmq4.SocketIdentity(id), received: received, retry: retry, timeout: timeout, turn: make(chan struct{}, 1)}
}

// dial connects to the kernel at network/addr, retrying every retry while
// nothing listens there yet (the kernel binds its ports a moment after it
// starts), and runs the ZMTP handshake. ctx bounds both; a SUB socket
// subscribes to everything.
func (s *zsock) dial(ctx context.Context, network, addr string) error {
	var d net.Dialer
	var nc net.Conn
	for {
		var err error
		if nc, err = d.DialContext(ctx, network, addr); err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("dial %s %s: %w", network, addr, context.Cause(ctx))
		}
		t := time.NewTimer(s.retry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("dial %s %s: %w (last: %v)", network, addr, context.Cause(ctx), err)
		}
	}
	if s.received != nil {
		nc = bufconn.New(nc, s.received)
	}
	if !s.adopt(nc) {
		return errSocketClosed
	}
	// A peer that accepts and never greets would hold Open: ctx's end
	// closes the connection under it.
	cut := context.AfterFunc(ctx, func() { nc.Close() })
	s.gc = &gatherConn{Conn: nc}
	zc, err := zmq4.Open(s.gc, null.Security(), s.typ, s.id, false, nil)
	if !cut() && err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		return fmt.Errorf("handshake with %s: %w", addr, err)
	}
	s.zc = zc
	if s.typ == zmq4.Sub {
		// ZMTP 3.0's subscription: a message of 1 then the topic (none:
		// every topic).
		if err := s.send(ctx, nil, [][]byte{{1}}); err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
	}
	return nil
}

// adopt makes nc the socket's connection, unless the socket was closed
// meanwhile (then nc is closed).
func (s *zsock) adopt(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		nc.Close()
		return false
	}
	s.nc = nc
	return true
}

// recv returns the next message, on the socket's reader only. ZMTP
// commands are skipped.
func (s *zsock) recv() (zmq4.Msg, error) {
	for {
		m, err := s.zc.RecvMsg()
		if err != nil {
			return m, err
		}
		if m.Type != zmq4.CmdMsg {
			return m, nil
		}
	}
}

// send writes frames as one message, after the sender before it. Waiting
// for the turn ends with ctx or stop; the write itself is bounded by
// the socket's timeout (a write cut halfway leaves the connection unusable: the
// caller then cuts the kernel).
func (s *zsock) send(ctx context.Context, stop <-chan struct{}, frames [][]byte) error {
	select {
	case s.turn <- struct{}{}:
	default:
		select {
		case s.turn <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-stop:
			return errSocketClosed
		}
	}
	defer func() { <-s.turn }()
	return s.write(frames)
}

// trySend writes frames if no other sender is writing; it says whether it
// wrote.
func (s *zsock) trySend(frames [][]byte) (bool, error) {
	select {
	case s.turn <- struct{}{}:
	default:
		return false, nil
	}
	defer func() { <-s.turn }()
	return true, s.write(frames)
}

func (s *zsock) write(frames [][]byte) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed || s.zc == nil {
		return errSocketClosed
	}
	g := s.gc
	g.gather = true
	err := s.zc.SendMsg(zmq4.NewMsgFrom(frames...))
	g.gather = false
	if err == nil {
		if err = g.Conn.SetWriteDeadline(time.Now().Add(s.timeout)); err == nil {
			_, err = g.Conn.Write(g.buf)
		}
	}
	g.buf = g.buf[:0]
	if cap(g.buf) > keepGathered {
		g.buf = nil
	}
	return err
}

// close closes the connection: the reader's recv and a blocked write
// return. It is idempotent.
func (s *zsock) close() {
	s.mu.Lock()
	s.closed = true
	nc := s.nc
	s.mu.Unlock()
	if nc != nil {
		nc.Close()
	}
}
