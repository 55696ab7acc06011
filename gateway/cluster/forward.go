package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"github.com/aiod/aiod/gateway/api"
)

// ReplicaHeader names, on every answer of a replica in a cluster, the
// replica that ran the request (a forwarded request's answer keeps its
// home's).
const ReplicaHeader = "AIO-Replica"

// forwarder sends requests on to their tenant's home: plain requests
// through a pooled HTTP client per replica, their answers streamed back as
// they come (SSE and NDJSON included), and WebSocket upgrades as a byte
// pipe between the client's connection and one to the home.
type forwarder struct {
	c *Cluster

	mu      sync.Mutex
	clients map[string]*fasthttp.HostClient // by address
	counts  map[string]*atomic.Int64        // requests forwarded, by replica id
	pipes   map[net.Conn]struct{}           // both ends of every WebSocket pipe, closed by close
	closed  bool
}

func (f *forwarder) init(c *Cluster) {
	f.c = c
	f.clients = map[string]*fasthttp.HostClient{}
	f.counts = map[string]*atomic.Int64{}
	f.pipes = map[net.Conn]struct{}{}
}

func (f *forwarder) count(id string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.counts[id]; n != nil {
		return n.Load()
	}
	return 0
}

func (f *forwarder) counted(id string) {
	f.mu.Lock()
	n := f.counts[id]
	if n == nil {
		n = new(atomic.Int64)
		f.counts[id] = n
	}
	f.mu.Unlock()
	n.Add(1)
}

// lostAfter is how long a connection to a replica goes unanswered before
// it is taken for lost: a home whose machine vanished sends no reset, and
// the calls forwarded to it must still be answered (a 502) well within a
// minute.
const lostAfter = 20 * time.Second

// dial reaches a replica: 5 s to connect; then keepalive probes after 5 s
// of silence, every 5 s, and the connection dropped after three
// unanswered, or when data it sent has gone unacknowledged for lostAfter
// (TCP_USER_TIMEOUT). A live home answers probes from its kernel, however
// long its answer takes.
func dial(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 5 * time.Second, Count: 3},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(lostAfter/time.Millisecond))
			}); err != nil {
				return err
			}
			return serr
		}}
	c, err := d.Dial("tcp", addr)
	if err == nil {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
	}
	return c, err
}

func (f *forwarder) client(addr string) *fasthttp.HostClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	hc := f.clients[addr]
	if hc == nil {
		hc = &fasthttp.HostClient{
			Addr: addr, Dial: dial, MaxConns: 1024, MaxIdleConnDuration: 30 * time.Second,
			// The answer of an execution comes when it ends (up to
			// --max-timeout), a stream's bytes as they come: no read
			// deadline here; the home bounds them, and a home that goes
			// away resets or times out the connection (keepalives).
			WriteTimeout: 30 * time.Second, StreamResponseBody: true,
			DisableHeaderNamesNormalizing: true, DisablePathNormalizing: true, NoDefaultUserAgentHeader: true,
		}
		f.clients[addr] = hc
	}
	return hc
}

// Forward answers ctx with what home answers to the same request, signed
// as forwarded by this replica (signed is the guard.ForwardedHeader
// value). A home that cannot be reached, or that stops before it has
// answered, is a 502 saying so: a call that was under way there may or may
// not have run.
func (c *Cluster) Forward(ctx *fasthttp.RequestCtx, home Member, header, signed string) {
	c.fw.counted(home.ID)
	if isUpgrade(ctx) {
		began := time.Now()
		if c.fw.pipe(ctx, home, header, signed) {
			c.count(Forwards, home.ID+"|answered")
			if c.cfg.Counter != nil {
				c.cfg.Counter.Observe(ForwardSeconds, home.ID, time.Since(began).Seconds())
			}
		} else {
			c.count(Forwards, home.ID+"|unreachable")
		}
		return
	}
	req := fasthttp.AcquireRequest()
	ctx.Request.CopyTo(req)
	req.Header.Set(header, signed)
	req.Header.ResetConnectionClose() // the pool's connection, not the client's, is kept or closed
	resp := fasthttp.AcquireResponse()
	began := time.Now()
	err := c.fw.client(home.Address).Do(req, resp)
	fasthttp.ReleaseRequest(req)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		c.count(Forwards, home.ID+"|unreachable")
		unreachable(ctx, home, err)
		return
	}
	c.count(Forwards, home.ID+"|answered")
	if c.cfg.Counter != nil {
		c.cfg.Counter.Observe(ForwardSeconds, home.ID, time.Since(began).Seconds())
	}
	resp.Header.CopyTo(&ctx.Response.Header)
	body := resp.BodyStream()
	if body == nil {
		ctx.Response.SetBodyRaw(append([]byte(nil), resp.Body()...))
		fasthttp.ReleaseResponse(resp)
		return
	}
	if n := resp.Header.ContentLength(); n >= 0 {
		ctx.SetBodyStream(&released{r: body, resp: resp}, n)
		return
	}
	// An answer of unknown length (a stream): every piece goes on at once;
	// a home that stops mid-stream ends it with an error event.
	format := string(resp.Header.ContentType())
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer fasthttp.ReleaseResponse(resp)
		defer func() {
			if cl, ok := body.(io.Closer); ok {
				_ = cl.Close()
			}
		}()
		buf := make([]byte, 32<<10)
		for {
			n, err := body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil || w.Flush() != nil {
					return // the client went away: the home's stream ends with this connection
				}
			}
			if err != nil {
				if err != io.EOF {
					streamError(w, format, home, err)
				}
				return
			}
		}
	})
}

// streamError ends a forwarded SSE or NDJSON stream whose home stopped
// answering with an error event in the stream's own format
// (docs/v2-contract.md), so that its client does not take the cut for an
// end.
func streamError(w *bufio.Writer, contentType string, home Member, err error) {
	b, _ := json.Marshal(map[string]any{"type": "error", "status": fasthttp.StatusBadGateway,
		"message": fmt.Sprintf("the caller's home replica %s stopped answering: %v; the execution may or may not have finished there", home.ID, err)})
	switch {
	case strings.HasPrefix(contentType, "text/event-stream"):
		_, _ = w.WriteString("event: error\ndata: ")
		_, _ = w.Write(b)
		_, _ = w.WriteString("\n\n")
	case strings.HasPrefix(contentType, "application/x-ndjson"):
		_, _ = w.Write(b)
		_ = w.WriteByte('\n')
	default:
		return
	}
	_ = w.Flush()
}

// released is a forwarded answer's body: the response goes back to its
// pool once the body is read.
type released struct {
	r    io.Reader
	resp *fasthttp.Response
	once sync.Once
}

func (r *released) Read(p []byte) (int, error) { return r.r.Read(p) }

func (r *released) Close() error {
	r.once.Do(func() {
		if cl, ok := r.r.(io.Closer); ok {
			_ = cl.Close()
		}
		fasthttp.ReleaseResponse(r.resp)
	})
	return nil
}

func unreachable(ctx *fasthttp.RequestCtx, home Member, err error) {
	ctx.Response.Header.Set(ReplicaHeader, "")
	api.Fail(ctx, fasthttp.StatusBadGateway, fmt.Sprintf(
		"the caller's home replica %s did not answer: %v; a call under way there may or may not have run (its tenant moves to another replica once the home misses its lease, --cluster-lease)",
		home.ID, err))
}

// pipe forwards a WebSocket upgrade: the request goes to home on a
// connection of its own, and from then on the bytes of both connections are
// copied both ways until either ends.
func (f *forwarder) pipe(ctx *fasthttp.RequestCtx, home Member, header, signed string) (reached bool) {
	req := fasthttp.AcquireRequest()
	ctx.Request.CopyTo(req)
	req.Header.Set(header, signed)
	head := req.Header.Header() // the request line and headers; an upgrade has no body
	fasthttp.ReleaseRequest(req)
	up, err := dial(home.Address)
	if err != nil {
		unreachable(ctx, home, err)
		return false
	}
	if !f.hold(up) {
		_ = up.Close()
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, "aiod is shutting down")
		return true
	}
	_ = up.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := up.Write(head); err != nil {
		f.drop(up)
		unreachable(ctx, home, err)
		return false
	}
	_ = up.SetWriteDeadline(time.Time{})
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(cc net.Conn) {
		if !f.hold(cc) {
			f.drop(up)
			return
		}
		done := make(chan struct{})
		go func() {
			_, _ = io.Copy(up, cc) // the client's frames
			_ = closeWrite(up)
			close(done)
		}()
		_, _ = io.Copy(cc, up) // the home's answer and frames
		f.drop(cc)
		f.drop(up)
		<-done
	})
	return true
}

func closeWrite(c net.Conn) error {
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		return tc.CloseWrite()
	}
	return c.Close()
}

func (f *forwarder) hold(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.pipes[c] = struct{}{}
	return true
}

func (f *forwarder) drop(c net.Conn) {
	f.mu.Lock()
	delete(f.pipes, c)
	f.mu.Unlock()
	_ = c.Close()
}

// close ends every pipe and the pools' idle connections.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	pipes := f.pipes
	f.pipes = map[net.Conn]struct{}{}
	clients := f.clients
	f.mu.Unlock()
	for c := range pipes {
		_ = c.Close()
	}
	for _, hc := range clients {
		hc.CloseIdleConnections()
	}
}

// isUpgrade reports whether the request asks to switch protocols (a
// WebSocket).
func isUpgrade(ctx *fasthttp.RequestCtx) bool {
	for _, part := range strings.Split(string(ctx.Request.Header.Peek("Connection")), ",") {
		if strings.EqualFold(strings.TrimSpace(part), "upgrade") {
			return len(ctx.Request.Header.Peek("Upgrade")) > 0
		}
	}
	return false
}
