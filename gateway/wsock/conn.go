package gateway

import (
	"context"
	"errors"
	"fmt"
	"github.com/aiod/aiod/stream/execution"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiod/aiod/stream"
	"github.com/coder/websocket"
)

// wsItem is one message waiting for a socket: a kernel event or a result
// to render, or a message already rendered.
type wsItem struct {
	ev     execution.Event
	ref    []byte // our protocol: the client's id of its own execution (raw JSON); nil for watched events
	sid    string // the session a watched event belongs to
	seq    int    // the output's seq in its execution (followed executions)
	execID string // the execution's id (followed executions)
	raw    []byte // already rendered
	bin    bool   // raw is a binary message
	size   int
}

// wsConn is one WebSocket, whichever protocol it speaks. Its reader is the
// fasthttp hijack goroutine (run's read function); its only writer is the
// goroutine run starts. Everything bound for the client goes through a
// byte-counted queue: pushing never blocks, and a push past the limit
// closes the socket with 1008 and a reason instead.
type wsConn struct {
	// Set once.
	hub    *liveHub
	c      *websocket.Conn
	fw     *flushWriter
	no     uint64 // connection number, for logs and execution refs
	route  string // the router pattern: wsRouteCode or wsRouteChannels
	lim    LiveLimits
	render func(it *wsItem) (typ websocket.MessageType, b []byte, ok bool) // writer goroutine only

	inflight atomic.Int32 // executions started over this socket and not finished

	mu      sync.Mutex // guards below
	items   []wsItem
	bytes   int
	closing bool
	code    websocket.StatusCode
	reason  string

	wake chan struct{} // poked on push; cap 1
	stop chan struct{} // closed by closeWith
}

var wsConnNo atomic.Uint64

// The WebSocket routes, as their metrics label them.
const (
	wsRouteCode     = "/v2/code/ws"
	wsRouteChannels = "/api/kernels/{id}/channels"
)

func (h *liveHub) newConn(c *websocket.Conn, fw *flushWriter, route string) *wsConn {
	return &wsConn{
		hub: h, c: c, fw: fw, no: wsConnNo.Add(1), route: route, lim: h.limits,
		wake: make(chan struct{}, 1), stop: make(chan struct{}),
	}
}

// push queues it for the writer. It never blocks. Past the byte limit the
// socket is closed as a slow consumer; pushes after that are dropped and
// counted.
func (wc *wsConn) push(it wsItem) {
	if it.size == 0 {
		it.size = wc.sizeOf(&it)
	}
	wc.mu.Lock()
	if wc.closing {
		wc.mu.Unlock()
		wc.hub.counters.Count(stream.WSDrops, "socket_closed", 1)
		return
	}
	if wc.bytes+it.size > wc.lim.QueueBytes {
		wc.closeLocked(wsClosePolicy, fmt.Sprintf("slow consumer: more than %d bytes waited to be sent", wc.lim.QueueBytes), "slow_consumer")
		wc.mu.Unlock()
		wc.hub.counters.Count(stream.WSDrops, "slow_consumer", 1)
		return
	}
	wc.items = append(wc.items, it)
	wc.bytes += it.size
	wc.mu.Unlock()
	select {
	case wc.wake <- struct{}{}:
	default:
	}
}

func (wc *wsConn) sizeOf(it *wsItem) int {
	switch {
	case it.raw != nil:
		return len(it.raw) + 64
	case it.ev.Msg != nil, it.ev.Out != nil: // an output of no message: a reply's pager payload
		return it.ev.Size()
	case it.ev.Result != nil:
		n := 512
		for _, o := range it.ev.Result.Outputs {
			n += 64 + len(o.Text) + len(o.Metadata)
			for _, v := range o.Data {
				n += len(v)
			}
			for _, l := range o.Traceback {
				n += len(l)
			}
		}
		return 2 * n // outputs, plus stdout and stderr again
	}
	return 64
}

// closeWith asks the writer to close the socket with code and reason
// (counted under key). The first call wins.
func (wc *wsConn) closeWith(code websocket.StatusCode, reason, key string) {
	wc.mu.Lock()
	wc.closeLocked(code, reason, key)
	wc.mu.Unlock()
}

func (wc *wsConn) closeLocked(code websocket.StatusCode, reason, key string) {
	if wc.closing {
		return
	}
	wc.closing = true
	wc.code, wc.reason = code, reason
	close(wc.stop)
	wc.hub.counters.Count(stream.WSCloses, stream.Labels(wc.route, key), 1)
	wc.hub.s.log.Debug("websocket closing", "route", wc.route, "conn", wc.no, "code", int(code), "reason", reason)
}

// take moves up to maxBytes of queued items (at least one) into dst.
func (wc *wsConn) take(dst []wsItem, maxBytes int) []wsItem {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	n, size := 0, 0
	for n < len(wc.items) && (n == 0 || size+wc.items[n].size <= maxBytes) {
		size += wc.items[n].size
		n++
	}
	dst = append(dst, wc.items[:n]...)
	clear(wc.items[:n])
	wc.items = wc.items[n:]
	if len(wc.items) == 0 {
		wc.items = nil
	}
	wc.bytes -= size
	return dst
}

// discard drops what is still queued at close and counts it.
func (wc *wsConn) discard() {
	wc.mu.Lock()
	n := len(wc.items)
	wc.items, wc.bytes = nil, 0
	wc.mu.Unlock()
	if n > 0 {
		wc.hub.counters.Count(stream.WSDrops, "socket_closed", int64(n))
	}
}

// run serves the socket: it starts the writer, runs read (the reader) on
// the calling goroutine until the socket fails or closes, then stops the
// writer and waits for it. done is fasthttp's shutdown signal.
func (wc *wsConn) run(done <-chan struct{}, read func(ctx context.Context) error) {
	h := wc.hub
	if !h.track(wc) {
		_ = wc.c.Close(wsCloseGoingAway, "aiod is shutting down")
		return
	}
	defer h.untrack(wc)
	// The socket's own lifetime, not the hub's: at shutdown the hub asks
	// for a going-away close (closeWith), which the writer must still be
	// able to send; a context ending first would cut the socket without it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		wc.writeLoop(ctx, done)
	}()
	err := read(ctx)
	switch st := websocket.CloseStatus(err); {
	case st != -1:
		wc.closeWith(st, "", "peer_closed")
	case errors.Is(err, context.Canceled):
		wc.closeWith(wsCloseNormal, "", "server_closed")
	default:
		wc.closeWith(websocket.StatusAbnormalClosure, "", "read_error")
	}
	cancel()
	<-wdone
	wc.discard()
	_ = wc.c.CloseNow()
}

// writeLoop is the socket's only writer. It takes everything queued (up to
// 1 MiB), writes it as one batch under one deadline, and pings the client
// every PingInterval. Asked to close, it sends the close frame with the
// reason; when a write fails or times out it cuts the socket.
func (wc *wsConn) writeLoop(ctx context.Context, done <-chan struct{}) {
	ping := time.NewTicker(wc.lim.PingInterval)
	defer ping.Stop()
	var batch []wsItem
	for {
		select {
		case <-wc.wake:
		case <-wc.stop:
		case <-done:
			wc.closeWith(wsCloseGoingAway, "aiod is shutting down", "shutdown")
		case <-ctx.Done():
			return
		case <-ping.C:
			pctx, pcancel := context.WithTimeout(ctx, wc.lim.WriteTimeout)
			err := wc.c.Ping(pctx)
			pcancel()
			if err != nil && ctx.Err() == nil {
				wc.closeWith(websocket.StatusAbnormalClosure, "", "ping_timeout")
				_ = wc.c.CloseNow()
				return
			}
			continue
		}
		wc.mu.Lock()
		closing, code, reason := wc.closing, wc.code, wc.reason
		wc.mu.Unlock()
		if closing {
			wc.discard()
			if code != websocket.StatusAbnormalClosure && ctx.Err() == nil {
				_ = wc.c.Close(code, reason)
			}
			return
		}
		batch = wc.take(batch[:0], 1<<20)
		if len(batch) == 0 {
			continue
		}
		if err := wc.writeBatch(ctx, batch); err != nil {
			if ctx.Err() == nil {
				wc.hub.s.log.Debug("websocket write failed", "route", wc.route, "conn", wc.no, "err", err)
				wc.closeWith(websocket.StatusAbnormalClosure, "", "write_error")
			}
			_ = wc.c.CloseNow()
			return
		}
		clear(batch)
		if len(wc.wake) == 0 && wc.pending() > 0 {
			select {
			case wc.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (wc *wsConn) pending() int {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return len(wc.items)
}

func (wc *wsConn) writeBatch(ctx context.Context, batch []wsItem) error {
	wc.fw.start()
	var werr error
	for i := range batch {
		typ, b, ok := wc.render(&batch[i])
		if !ok {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, wc.lim.WriteTimeout)
		werr = wc.c.Write(wctx, typ, b) // lands in fw's memory: never blocks
		cancel()
		if werr != nil {
			break
		}
	}
	if err := wc.fw.release(); werr == nil {
		werr = err
	}
	return werr
}
