package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"sync"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/openapi"
)

// docsCSP is the /docs page's Content-Security-Policy: its own script and
// style sheet, the document fetched from the daemon, nothing else.
const docsCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// openAPIPaths are the document and its page: open without credentials,
// like /healthz (they describe the API, they do not use it). /v1/openapi.json
// and /v1/docs are the agent_sandbox reference's names for them, the same
// answers.
var openAPIPaths = []string{"/openapi.json", "/docs", "/docs/docs.js", "/docs/docs.css", "/v1/openapi.json", "/v1/docs"}

// registerOpenAPI serves GET /openapi.json and the page at /docs, and
// their /v1 aliases.
// Each is made on its first request, not at start (half a MiB of heap).
func registerOpenAPI(r *router.Router) {
	doc := sync.OnceValue(func() *webAsset { return asset(openapi.Document(Version), "application/json") })
	serveDoc := func(ctx *fasthttp.RequestCtx) {
		d := doc()
		webHeaders(ctx, d.ctype)
		serveWebAsset(ctx, d)
	}
	r.GET("/openapi.json", serveDoc)
	r.GET("/v1/openapi.json", serveDoc)
	pages := openapi.Docs()
	for _, name := range []string{"index.html", "docs.js", "docs.css"} {
		if _, err := fs.Stat(pages, name); err != nil { // embedded: a build problem
			panic("gateway: load the docs page: " + err.Error())
		}
		a := sync.OnceValue(func() *webAsset {
			b, _ := fs.ReadFile(pages, name) // it is there (Stat)
			return asset(b, webContentType(name))
		})
		p := "/docs/" + name
		if name == "index.html" {
			p = "/docs"
		}
		page := func(ctx *fasthttp.RequestCtx) {
			a := a()
			webHeaders(ctx, a.ctype)
			ctx.Response.Header.Set("Content-Security-Policy", docsCSP)
			ctx.Response.Header.Set("X-Frame-Options", "DENY")
			serveWebAsset(ctx, a)
		}
		r.GET(p, page)
		if p == "/docs" {
			r.GET("/v1/docs", page) // its script and style sheet are named absolutely
		}
	}
}

// asset makes a served file of b (no gzip copy: these are small or, for
// the document, fetched rarely).
func asset(b []byte, ctype string) *webAsset {
	sum := sha256.Sum256(b)
	return &webAsset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
}
