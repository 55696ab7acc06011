package gateway

import (
	"context"
	"log/slog"
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
func accessLog(log *slog.Logger, next fasthttp.RequestHandler) fasthttp.RequestHandler {
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
		log.LogAttrs(context.Background(), slog.LevelInfo, "http", slog.String("method", string(ctx.Method())), slog.String("route", route),
			slog.Int("status", status), slog.Float64("ms", float64(time.Since(start).Microseconds())/1000), slog.Int("bytes", size))
	}
}
