package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
)

// accessLog wraps the root handler: one info line per request with the
// method, the route pattern that matched (fasthttp/router's, so ids in
// paths stay out), the status, the duration and the bytes of the body
// sent. Never a body, a query string or a header: credentials travel in
// those. A request no route matched (or that the guard refused first) logs
// route "-"; a WebSocket upgrade logs 101 once the socket is handed over.
//
// The line is formatted and written by w's goroutine, not on the request's
// path: fasthttp writes the answer once the handler returns, and on a busy
// core the writer runs after it.
func accessLog(w *accessWriter, next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		next(ctx)
		route, _ := ctx.UserValue(router.MatchedRoutePathParam).(string)
		if route == "" {
			route = "-"
		}
		status, size := ctx.Response.StatusCode(), 0
		switch {
		case ctx.Hijacked():
			status = fasthttp.StatusSwitchingProtocols
		case ctx.Response.IsBodyStream():
			size = max(ctx.Response.Header.ContentLength(), 0) // reading Body() would drain the stream
		default:
			size = len(ctx.Response.Body())
		}
		w.put(accessLine{method: string(ctx.Method()), route: route, status: status, size: size, took: time.Since(start)})
	}
}

// accessLine is one request's access log line, before formatting.
type accessLine struct {
	method, route string
	status, size  int
	took          time.Duration
}

// accessQueue is how many lines may wait for the writer; a request that
// finds it full waits for room (no line is dropped).
const accessQueue = 1024

// accessWriter writes access log lines from its own goroutine, between
// start and stop (Serve and Shutdown); before and after, a line is written
// by the request itself.
type accessWriter struct {
	log   *slog.Logger
	lines chan accessLine

	mu      sync.RWMutex // held shared by a request handing a line over
	running bool
	stopped bool
	quit    chan struct{}
	done    chan struct{}
}

func newAccessWriter(log *slog.Logger) *accessWriter {
	return &accessWriter{log: log, lines: make(chan accessLine, accessQueue), quit: make(chan struct{}), done: make(chan struct{})}
}

// start starts the writer's goroutine (once).
func (w *accessWriter) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running || w.stopped {
		return
	}
	w.running = true
	go w.run()
}

// stop writes what waits and ends the goroutine; it returns when the last
// line is written or ctx ends.
func (w *accessWriter) stop(ctx context.Context) error {
	w.mu.Lock() // every hand-over in progress is over
	was := w.running
	if !w.stopped {
		w.stopped = true
		close(w.quit)
	}
	w.mu.Unlock()
	if !was {
		return nil
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *accessWriter) put(l accessLine) {
	w.mu.RLock()
	if w.running && !w.stopped {
		w.lines <- l // the goroutine runs until stop, which waits for this
		w.mu.RUnlock()
		return
	}
	w.mu.RUnlock()
	w.write(l)
}

func (w *accessWriter) run() {
	defer close(w.done)
	for {
		select {
		case l := <-w.lines:
			w.write(l)
		case <-w.quit:
			for {
				select {
				case l := <-w.lines:
					w.write(l)
				default:
					return
				}
			}
		}
	}
}

func (w *accessWriter) write(l accessLine) {
	w.log.LogAttrs(context.Background(), slog.LevelInfo, "http", slog.String("method", l.method), slog.String("route", l.route),
		slog.Int("status", l.status), slog.Float64("ms", float64(l.took.Microseconds())/1000), slog.Int("bytes", l.size))
}
