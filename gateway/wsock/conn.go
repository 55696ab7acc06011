package wsock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/execution"
)

// Item is one message waiting for a socket: an event to render (the
// surface's render function reads the fields it set), or a message
// already rendered (Raw).
type Item struct {
	Ev     execution.Event
	Ref    []byte // aiod's protocol: the client's id of its own execution (raw JSON); nil for watched events
	SID    string // the session a watched event belongs to
	Seq    int    // the output's seq in its execution (followed executions)
	ExecID string // the execution's id (followed executions)
	Raw    []byte // already rendered: sent as a text message
	Size   int    // bytes it counts for in the queue; 0 has Push estimate it
}

// Render turns a queued item into a message; ok false skips it. It runs on
// the socket's writer goroutine only.
type Render func(it *Item) (typ websocket.MessageType, b []byte, ok bool)

// Conn is one WebSocket, whichever protocol it speaks. Its reader is the
// fasthttp hijack goroutine (Run's read function); its only writer is the
// goroutine Run starts. Everything bound for the client goes through a
// byte-counted queue: pushing never blocks, and a push past the limit
// closes the socket with 1008 and a reason instead.
type Conn struct {
	// Set once.
	WS     *websocket.Conn // read it (in Run's read function) and ask it its subprotocol; never write to it
	hub    *Hub
	fw     *flushWriter
	done   <-chan struct{} // fasthttp's shutdown signal
	no     uint64          // connection number, for logs
	route  string          // the router pattern the socket came in on
	lim    Limits
	render Render // writer goroutine only

	// Inflight counts what the surface started over this socket and has
	// not finished (executions); the surface keeps it under
	// Limits().MaxInFlight.
	Inflight atomic.Int32

	mu      sync.Mutex // guards below
	items   []Item
	bytes   int
	closing bool
	code    websocket.StatusCode
	reason  string

	wake chan struct{} // poked on push; cap 1
	stop chan struct{} // closed by closeWith
}

var connNo atomic.Uint64

func (h *Hub) newConn(c *websocket.Conn, fw *flushWriter, route string, done <-chan struct{}) *Conn {
	return &Conn{
		WS: c, hub: h, fw: fw, done: done, no: connNo.Add(1), route: route, lim: h.limits,
		wake: make(chan struct{}, 1), stop: make(chan struct{}),
	}
}

// Limits are the socket's limits.
func (wc *Conn) Limits() Limits { return wc.lim }

// Log is the daemon's logger.
func (wc *Conn) Log() *slog.Logger { return wc.hub.log }

// Drop counts n messages the surface dropped for why (Drops).
func (wc *Conn) Drop(why string, n int64) { wc.hub.counters.Count(Drops, why, n) }

// Push queues it for the writer. It never blocks. Past the byte limit the
// socket is closed as a slow consumer; pushes after that are dropped and
// counted.
func (wc *Conn) Push(it Item) {
	if it.Size == 0 {
		it.Size = sizeOf(&it)
	}
	wc.mu.Lock()
	if wc.closing {
		wc.mu.Unlock()
		wc.Drop("socket_closed", 1)
		return
	}
	if wc.bytes+it.Size > wc.lim.QueueBytes {
		wc.closeLocked(ClosePolicy, fmt.Sprintf("slow consumer: more than %d bytes waited to be sent", wc.lim.QueueBytes), "slow_consumer")
		wc.mu.Unlock()
		wc.Drop("slow_consumer", 1)
		return
	}
	wc.items = append(wc.items, it)
	wc.bytes += it.Size
	wc.mu.Unlock()
	select {
	case wc.wake <- struct{}{}:
	default:
	}
}

// sizeOf estimates the bytes an item holds.
func sizeOf(it *Item) int {
	switch {
	case it.Raw != nil:
		return len(it.Raw) + 64
	case it.Ev.Msg != nil, it.Ev.Out != nil: // an output of no message: a reply's pager payload
		return it.Ev.Size()
	case it.Ev.Result != nil:
		n := 512
		for _, o := range it.Ev.Result.Outputs {
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

// CloseWith asks the writer to close the socket with code and reason
// (counted under key). The first call wins.
func (wc *Conn) CloseWith(code websocket.StatusCode, reason, key string) {
	wc.mu.Lock()
	wc.closeLocked(code, reason, key)
	wc.mu.Unlock()
}

func (wc *Conn) closeLocked(code websocket.StatusCode, reason, key string) {
	if wc.closing {
		return
	}
	wc.closing = true
	wc.code, wc.reason = code, reason
	close(wc.stop)
	wc.hub.counters.Count(Closes, stream.Labels(wc.route, key), 1)
	wc.hub.log.Debug("websocket closing", "route", wc.route, "conn", wc.no, "code", int(code), "reason", reason)
}

// take moves up to maxBytes of queued items (at least one) into dst.
func (wc *Conn) take(dst []Item, maxBytes int) []Item {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	n, size := 0, 0
	for n < len(wc.items) && (n == 0 || size+wc.items[n].Size <= maxBytes) {
		size += wc.items[n].Size
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
func (wc *Conn) discard() {
	wc.mu.Lock()
	n := len(wc.items)
	wc.items, wc.bytes = nil, 0
	wc.mu.Unlock()
	if n > 0 {
		wc.Drop("socket_closed", int64(n))
	}
}

// Read reads the client's next message, on Run's read function only. It
// ends when the socket does: the writer closes it when a write fails and
// after the close handshake, and nothing else ends the read function's
// context before it returns, so Read takes none (given one that can end,
// the library would arm a timer for every message).
func (wc *Conn) Read() (websocket.MessageType, []byte, error) {
	return wc.WS.Read(context.Background())
}

// Run serves the socket: it starts the writer, which renders queued items
// with render, runs read (the reader) on the calling goroutine until the
// socket fails or closes, then stops the writer and waits for it.
func (wc *Conn) Run(render Render, read func(ctx context.Context) error) {
	wc.render = render
	done := wc.done
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
		wc.CloseWith(st, "", "peer_closed")
	case errors.Is(err, context.Canceled):
		wc.CloseWith(CloseNormal, "", "server_closed")
	default:
		wc.CloseWith(websocket.StatusAbnormalClosure, "", "read_error")
	}
	cancel()
	<-wdone
	wc.discard()
	_ = wc.WS.CloseNow()
}

// writeLoop is the socket's only writer. It takes everything queued (up to
// 1 MiB), writes it as one batch under one deadline, and pings the client
// every PingInterval. Asked to close, it sends the close frame with the
// reason; when a write fails or times out it cuts the socket.
func (wc *Conn) writeLoop(ctx context.Context, done <-chan struct{}) {
	ping := time.NewTicker(wc.lim.PingInterval)
	defer ping.Stop()
	var batch []Item
	for {
		select {
		case <-wc.wake:
		case <-wc.stop:
		case <-done:
			wc.CloseWith(CloseGoingAway, "aiod is shutting down", "shutdown")
		case <-ctx.Done():
			return
		case <-ping.C:
			pctx, pcancel := context.WithTimeout(ctx, wc.lim.WriteTimeout)
			err := wc.WS.Ping(pctx)
			pcancel()
			if err != nil && ctx.Err() == nil {
				wc.CloseWith(websocket.StatusAbnormalClosure, "", "ping_timeout")
				_ = wc.WS.CloseNow()
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
				_ = wc.WS.Close(code, reason)
			}
			return
		}
		batch = wc.take(batch[:0], 1<<20)
		if len(batch) == 0 {
			continue
		}
		if err := wc.writeBatch(batch); err != nil {
			if ctx.Err() == nil {
				wc.hub.log.Debug("websocket write failed", "route", wc.route, "conn", wc.no, "err", err)
				wc.CloseWith(websocket.StatusAbnormalClosure, "", "write_error")
			}
			_ = wc.WS.CloseNow()
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

func (wc *Conn) pending() int {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return len(wc.items)
}

func (wc *Conn) writeBatch(batch []Item) error {
	wc.fw.start()
	var werr error
	for i := range batch {
		typ, b, ok := wc.render(&batch[i])
		if !ok {
			continue
		}
		// The batch lands in fw's memory, so this never waits on the
		// socket: no deadline here (a context that can end costs the
		// library a timer per message); fw's writes carry the deadline.
		werr = wc.WS.Write(context.Background(), typ, b)
		if werr != nil {
			break
		}
	}
	if err := wc.fw.release(); werr == nil {
		werr = err
	}
	return werr
}
