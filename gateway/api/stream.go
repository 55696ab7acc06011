package api

import (
	"bufio"
	"net"
	"time"
)

// A streamed answer (fasthttp's body stream writer) runs in a goroutine
// of its own, writing into a pipe that fasthttp copies to the connection.
// A client that stops reading fills its socket, the copy blocks, and so
// does the stream, for ever: Arm gives the connection's writes a deadline
// instead, so that such a client is cut and what the stream follows (an
// execution, a command) goes on. The stream takes conn (ctx.Conn()) in the
// handler, before it returns: the RequestCtx is reused once the answer is
// done, possibly while the stream's goroutine still runs.

// Arm gives the writes to conn that follow timeout (10 s when 0) to finish.
func Arm(conn net.Conn, timeout time.Duration) {
	if conn == nil {
		return
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
}

// Flush arms conn and flushes w.
func Flush(conn net.Conn, w *bufio.Writer, timeout time.Duration) error {
	Arm(conn, timeout)
	return w.Flush()
}
