package gateway

import (
	"testing"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
)

// BenchmarkRequestMetrics is the cost countRequests adds to one request:
// the same routed no-op handler with and without it, in one run (compare
// the two ns/op).
func BenchmarkRequestMetrics(b *testing.B) {
	srv, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(b.Context())
	r := router.New()
	r.SaveMatchedRoutePath = true
	r.POST("/v2/code/execute", func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(200) })
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v2/code/execute")
	for _, c := range []struct {
		name string
		h    fasthttp.RequestHandler
	}{{"bare", r.Handler}, {"counted", srv.countRequests(r.Handler)}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.h(&ctx)
			}
		})
	}
}
