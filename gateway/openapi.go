package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/openapi"
)

// docsCSP is the /docs page's Content-Security-Policy: its own script and
// style sheet, the document fetched from the daemon, nothing else.
const docsCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// openAPIPaths are the document and its page: open without credentials,
// like /healthz (they describe the API, they do not use it).
var openAPIPaths = []string{"/openapi.json", "/docs", "/docs/docs.js", "/docs/docs.css"}

// registerOpenAPI serves GET /openapi.json and the page at /docs.
func registerOpenAPI(r *router.Router) {
	doc := asset(openapi.Document(Version), "application/json")
	r.GET("/openapi.json", func(ctx *fasthttp.RequestCtx) {
		webHeaders(ctx, doc.ctype)
		serveWebAsset(ctx, doc)
	})
	pages := openapi.Docs()
	for _, name := range []string{"index.html", "docs.js", "docs.css"} {
		b, err := fs.ReadFile(pages, name)
		if err != nil { // embedded: a build problem
			panic("gateway: load the docs page: " + err.Error())
		}
		a := asset(b, webContentType(name))
		p := "/docs/" + name
		if name == "index.html" {
			p = "/docs"
		}
		r.GET(p, func(ctx *fasthttp.RequestCtx) {
			webHeaders(ctx, a.ctype)
			ctx.Response.Header.Set("Content-Security-Policy", docsCSP)
			ctx.Response.Header.Set("X-Frame-Options", "DENY")
			serveWebAsset(ctx, a)
		})
	}
}

// asset makes a served file of b (no gzip copy: these are small or, for
// the document, fetched rarely).
func asset(b []byte, ctype string) *webAsset {
	sum := sha256.Sum256(b)
	return &webAsset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
}
