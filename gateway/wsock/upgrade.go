package wsock

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/aiod/aiod/gateway/api"
)

// WebSockets share fasthttp's port. fasthttpadaptor cannot serve them (it
// never writes the 101 answer), so upgrade checks the request in fasthttp,
// hijacks the connection, and hands websocket.Accept an upgradeWriter: an
// http.ResponseWriter and http.Hijacker that writes the 101 status line and
// headers itself. The hijack handler serves the socket until it closes,
// because fasthttp closes the connection when the handler returns.

// Close codes used by the live routes.
const (
	CloseNormal    = websocket.StatusNormalClosure
	CloseGoingAway = websocket.StatusGoingAway
	ClosePolicy    = websocket.StatusPolicyViolation
)

// Upgrade answers a WebSocket upgrade on ctx, or an error envelope when the
// request is not one or its origin is refused. serve runs on fasthttp's
// hijack goroutine for the socket's whole life (it calls the Conn's Run);
// the socket is closed when it returns. route is the router pattern
// metrics name the socket by; protocols are the subprotocols offered to
// the client. A hub that is shutting down closes the socket at once
// (1001) instead of serving it.
func (h *Hub) Upgrade(ctx *fasthttp.RequestCtx, route string, protocols []string, serve func(c *Conn)) {
	if !isUpgrade(ctx) {
		ctx.Response.Header.Set("Upgrade", "websocket")
		api.Fail(ctx, fasthttp.StatusUpgradeRequired, fmt.Sprintf("%s is a WebSocket endpoint: send a WebSocket upgrade request", ctx.Path()))
		return
	}
	if ok, origin := h.origin(ctx); !ok {
		h.counters.Count(Refused, "origin", 1)
		api.Fail(ctx, fasthttp.StatusForbidden, fmt.Sprintf("cross-origin WebSocket from %q refused: allow it with --allowed-origins (AIO_ALLOWED_ORIGINS)", origin))
		return
	}
	r := new(http.Request)
	if err := fasthttpadaptor.ConvertRequest(ctx, r, true); err != nil {
		api.Fail(ctx, fasthttp.StatusBadRequest, "cannot read the upgrade request: "+err.Error())
		return
	}
	done := ctx.Done()
	h.watchShutdown(done)
	lim := h.limits
	// The replica that serves the socket, in a cluster (cluster.ReplicaHeader).
	replica := string(ctx.Response.Header.Peek("AIO-Replica"))
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		raw := c
		if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
			raw = u.UnsafeConn()
		}
		fw := &flushWriter{conn: raw, timeout: lim.WriteTimeout}
		// The answer is written here, not by fasthttp: it carries the
		// headers every answer does (guard.SecureHeaders) on its own.
		hdr := http.Header{"X-Content-Type-Options": {"nosniff"}, "Cross-Origin-Resource-Policy": {"same-origin"}}
		if replica != "" {
			hdr.Set("AIO-Replica", replica)
		}
		w := &upgradeWriter{c: c, raw: raw, fw: fw, h: hdr, timeout: lim.WriteTimeout}
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
			InsecureSkipVerify: true, // the origin was checked above, against our own rules
			Subprotocols:       protocols,
			CompressionMode:    websocket.CompressionDisabled, // latency first; outputs are small or already compressed (PNG)
		})
		if err != nil {
			h.log.Debug("websocket accept failed", "path", r.URL.Path, "err", err)
			return
		}
		ws.SetReadLimit(h.maxRead)
		wc := h.newConn(ws, fw, route, done)
		if !h.track(wc) {
			_ = ws.Close(CloseGoingAway, "aiod is shutting down")
			return
		}
		defer h.untrack(wc)
		serve(wc)
		_ = ws.CloseNow()
	})
}

// isUpgrade reports whether the request asks for a WebSocket.
func isUpgrade(ctx *fasthttp.RequestCtx) bool {
	if !ctx.IsGet() {
		return false
	}
	hasToken := func(v []byte, tok string) bool {
		for _, part := range strings.Split(string(v), ",") {
			if strings.EqualFold(strings.TrimSpace(part), tok) {
				return true
			}
		}
		return false
	}
	return hasToken(ctx.Request.Header.Peek("Connection"), "upgrade") &&
		hasToken(ctx.Request.Header.Peek("Upgrade"), "websocket")
}

// upgradeWriter is what websocket.Accept writes its answer to. Hijack
// writes the 101 answer; Write (only reached when Accept refuses the
// handshake) writes a complete error answer.
type upgradeWriter struct {
	c       net.Conn // the hijacked connection: reads go through fasthttp's buffer
	raw     net.Conn // the socket itself
	fw      *flushWriter
	h       http.Header
	status  int
	timeout time.Duration
	wrote   bool
}

func (w *upgradeWriter) Header() http.Header { return w.h }

func (w *upgradeWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *upgradeWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.wrote = true
		if w.status == 0 {
			w.status = http.StatusOK
		}
		w.h.Set("Connection", "close")
		if err := w.writeHead(); err != nil {
			return 0, err
		}
	}
	return w.raw.Write(p)
}

func (w *upgradeWriter) writeHead() error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", w.status, http.StatusText(w.status))
	_ = w.h.Write(&b)
	b.WriteString("\r\n")
	_ = w.raw.SetWriteDeadline(time.Now().Add(w.timeout))
	_, err := w.raw.Write(b.Bytes())
	return err
}

// Hijack writes the 101 answer and hands the connection to the WebSocket.
func (w *upgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	w.wrote = true
	if err := w.writeHead(); err != nil {
		return nil, nil, fmt.Errorf("write the 101 answer: %w", err)
	}
	conn := &hijackedConn{Conn: w.c, raw: w.raw}
	return conn, bufio.NewReadWriter(bufio.NewReaderSize(conn, 16<<10), bufio.NewWriterSize(w.fw, 32<<10)), nil
}

// hijackedConn reads through fasthttp's buffered reader (it may hold bytes
// the client sent right after the upgrade) and really closes the socket:
// fasthttp's hijacked conn ignores Close, which would leave the WebSocket's
// reader blocked when the socket is closed from our side.
type hijackedConn struct {
	net.Conn
	raw net.Conn
}

func (c *hijackedConn) Close() error { return c.raw.Close() }

// flushWriter sits under the WebSocket's bufio.Writer. Normally every write
// goes straight to the socket, with a deadline. Between hold and release,
// the writer goroutine's messages are gathered in memory and written with
// one system call: that is how the writer batches, since the WebSocket
// library flushes after every message.
type flushWriter struct {
	conn    net.Conn
	timeout time.Duration

	mu   sync.Mutex // guards below; held while writing to conn
	hold bool
	buf  []byte
}

func (w *flushWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hold {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	return w.writeLocked(p)
}

func (w *flushWriter) writeLocked(p []byte) (int, error) {
	if err := w.conn.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil {
		return 0, err
	}
	return w.conn.Write(p)
}

// start begins a batch.
func (w *flushWriter) start() {
	w.mu.Lock()
	w.hold = true
	w.mu.Unlock()
}

// release ends a batch and writes it, bounded by the write timeout.
func (w *flushWriter) release() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hold = false
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.writeLocked(w.buf)
	if cap(w.buf) > 4<<20 {
		w.buf = nil // do not keep a huge batch's memory for the socket's life
	} else {
		w.buf = w.buf[:0]
	}
	return err
}
