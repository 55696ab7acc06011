// Package wsock is the WebSocket plumbing the live surfaces share: the
// upgrade on fasthttp's port, one connection's byte-counted queue and its
// single writer, and the hub that tracks every open socket so that
// shutdown can close them. It knows no protocol: a surface (aiod's own
// /v2/code/ws, Jupyter's kernel channels) reads the client's messages and
// renders what it queued.
package wsock

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/stream"
)

// Names of the counters the WebSocket routes keep (in the daemon's
// stream.Counters), described in Families.
const (
	Closes  = "ws_closes"  // labels: route, reason (slow_consumer, ping_timeout, peer_closed, ...)
	Drops   = "ws_drops"   // label: why messages bound for a WebSocket were dropped
	Refused = "ws_refused" // label: why an upgrade was refused (origin)
)

// Families describes the counters above for the metrics endpoint.
var Families = map[string]stream.Family{
	Closes:  {Help: "WebSockets closed, by route and reason.", Labels: []string{"route", "reason"}},
	Drops:   {Help: "Messages bound for a WebSocket that were dropped, by reason.", Labels: []string{"reason"}},
	Refused: {Help: "WebSocket upgrades refused, by reason.", Labels: []string{"reason"}},
}

// Limits tune the WebSocket routes. Zero values take the defaults named on
// each field.
type Limits struct {
	// QueueBytes is how many bytes may wait for one socket; past it the
	// socket is closed with 1008 (policy violation) and a reason, and its
	// executions go on. 16 MiB.
	QueueBytes int
	// WriteTimeout bounds writing one batch of messages to a socket; a
	// socket that takes longer is cut. 10 s.
	WriteTimeout time.Duration
	// PingInterval is the time between keepalive pings; a ping unanswered
	// within WriteTimeout cuts the socket. 20 s.
	PingInterval time.Duration
	// MaxInFlight is how many executions one socket may have running or
	// queued at once (503 past it). 64.
	MaxInFlight int
}

// WithDefaults is l with its zero values replaced by the defaults.
func (l Limits) WithDefaults() Limits {
	if l.QueueBytes <= 0 {
		l.QueueBytes = 16 << 20
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = 10 * time.Second
	}
	if l.PingInterval <= 0 {
		l.PingInterval = 20 * time.Second
	}
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = 64
	}
	return l
}

// Config is what a hub needs.
type Config struct {
	Limits   Limits
	MaxRead  int64            // largest client message; --max-body
	Counters *stream.Counters // where Closes, Drops and Refused are counted
	Logger   *slog.Logger
	// CheckOrigin is the guard's origin rule, checked again at the upgrade
	// (the guard refuses a foreign origin before routing; this matters only
	// if the upgrade is ever reached another way). It returns the origin
	// it refused.
	CheckOrigin func(*fasthttp.RequestCtx) (ok bool, origin string)
}

// Hub tracks the open sockets of every live route. Close it at shutdown,
// after the HTTP server stopped accepting.
type Hub struct {
	// Set once.
	limits   Limits // defaults filled in
	maxRead  int64
	counters *stream.Counters
	log      *slog.Logger
	origin   func(*fasthttp.RequestCtx) (bool, string)

	mu       sync.Mutex // guards below
	conns    map[*Conn]struct{}
	closing  bool
	watching bool          // a goroutine waits for fasthttp's shutdown signal
	stop     chan struct{} // closed by Shutdown

	wg sync.WaitGroup // sockets (from upgrade to the end of their serve function), the shutdown watcher
}

// NewHub makes a hub.
func NewHub(cfg Config) *Hub {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CheckOrigin == nil {
		cfg.CheckOrigin = func(*fasthttp.RequestCtx) (bool, string) { return true, "" }
	}
	return &Hub{
		limits: cfg.Limits.WithDefaults(), maxRead: cfg.MaxRead, counters: cfg.Counters, log: cfg.Logger,
		origin: cfg.CheckOrigin, conns: map[*Conn]struct{}{}, stop: make(chan struct{}),
	}
}

// Limits are the hub's limits, defaults filled in.
func (h *Hub) Limits() Limits { return h.limits }

// Open counts the open sockets by route.
func (h *Hub) Open() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for c := range h.conns {
		out[c.route]++
	}
	return out
}

// watchShutdown starts, once, a goroutine that shuts the hub down when
// fasthttp starts shutting down (done is RequestCtx.Done), since fasthttp
// neither closes nor waits for hijacked connections.
func (h *Hub) watchShutdown(done <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watching || h.closing || done == nil {
		return
	}
	h.watching = true
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		select {
		case <-done:
			h.Shutdown()
		case <-h.stop:
		}
	}()
}

// Shutdown closes every socket with 1001 (going away). Idempotent.
func (h *Hub) Shutdown() {
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		return
	}
	h.closing = true
	close(h.stop)
	conns := make([]*Conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		c.CloseWith(CloseGoingAway, "aiod is shutting down", "shutdown")
	}
}

// Close shuts the hub down and waits, bounded by ctx, for every socket to
// be done. Until it is called, the hub shuts down when fasthttp signals
// shutdown and is not waited for.
func (h *Hub) Close(ctx context.Context) error {
	h.Shutdown()
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// track registers a connection until untrack, for Close to wait for;
// false when the hub is shutting down.
func (h *Hub) track(c *Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.conns[c] = struct{}{}
	h.wg.Add(1)
	return true
}

func (h *Hub) untrack(c *Conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
	h.wg.Done()
}
