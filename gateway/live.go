package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/aiod/aiod/stream"
	"github.com/fasthttp/router"
)

// LiveLimits tune the WebSocket routes. Zero values take the defaults named
// on each field.
type LiveLimits struct {
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

func (l LiveLimits) withDefaults() LiveLimits {
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

// liveHub owns what the live routes start: WebSocket connections and the
// executions started over them (their temporary sessions are the
// registry's).
type liveHub struct {
	// Set once.
	s        *Server
	ctx      context.Context // ends at shutdown; parent of WebSocket-started executions
	cancel   context.CancelFunc
	counters *stream.Counters // the registry's: closes, drops, refusals
	limits   LiveLimits       // defaults filled in

	mu       sync.Mutex // guards below
	conns    map[*wsConn]struct{}
	closing  bool
	watching bool // a goroutine waits for fasthttp's shutdown signal

	wg sync.WaitGroup // connections, WebSocket-started executions, the shutdown watcher
}

// newLiveHub makes the live routes' state; New calls it once, after it
// made s.base.
func newLiveHub(s *Server, l LiveLimits, c *stream.Counters) *liveHub {
	h := &liveHub{s: s, conns: map[*wsConn]struct{}{}, counters: c, limits: l.withDefaults()}
	h.ctx, h.cancel = context.WithCancel(s.base)
	return h
}

func (s *Server) hub() *liveHub { return s.live }

// registerLive adds the WebSocket routes and the Jupyter kernels API.
func (s *Server) registerLive(r *router.Router) {
	h := s.hub()
	r.GET("/v2/code/ws", h.codeWS)
	r.GET("/api", h.jupyterRoot)
	r.GET("/api/kernelspecs", h.listKernelspecs)
	r.GET("/api/kernelspecs/{name}", h.getKernelspec)
	r.GET("/api/kernels", h.listKernels)
	r.POST("/api/kernels", h.startKernel)
	r.GET("/api/kernels/{id}", h.getKernel)
	r.DELETE("/api/kernels/{id}", h.deleteKernel)
	r.POST("/api/kernels/{id}/interrupt", h.interruptKernel)
	r.POST("/api/kernels/{id}/restart", h.restartKernel)
	r.GET("/api/kernels/{id}/channels", h.kernelChannels)
}

// watchShutdown starts, once, a goroutine that shuts the hub down when
// fasthttp starts shutting down (done is RequestCtx.Done), since fasthttp
// neither closes nor waits for hijacked connections.
func (h *liveHub) watchShutdown(done <-chan struct{}) {
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
			h.shutdown()
		case <-h.ctx.Done():
		}
	}()
}

// shutdown closes every WebSocket with 1001 (going away) and cancels the
// executions started over them. Idempotent.
func (h *liveHub) shutdown() {
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		return
	}
	h.closing = true
	conns := make([]*wsConn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	h.cancel()
	for _, c := range conns {
		c.closeWith(wsCloseGoingAway, "aiod is shutting down", "shutdown")
	}
}

// closeLive closes every WebSocket and waits, bounded by ctx, for the
// connections and the executions started over them. Server.Shutdown
// should call it after the HTTP server stopped accepting; until it does,
// the hub shuts down when fasthttp signals shutdown and is not waited for.
func (s *Server) closeLive(ctx context.Context) error {
	h := s.hub()
	h.shutdown()
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

// track registers a connection; false when the hub is shutting down.
func (h *liveHub) track(c *wsConn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.conns[c] = struct{}{}
	return true
}

func (h *liveHub) untrack(c *wsConn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

// goExec runs f on a goroutine that closeLive waits for; false when the
// hub is shutting down.
func (h *liveHub) goExec(f func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f()
	}()
	return true
}
