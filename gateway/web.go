package gateway

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/web"
)

// webCSP is the page's Content-Security-Policy. Everything comes from the
// daemon itself: scripts and styles from /static/, API calls and the
// WebSocket from the same host ('self' matches ws: and wss: on it), images
// also from data: (charts) and blob: (files fetched from the file plane).
// HTML outputs run in srcdoc iframes sandboxed without allow-scripts and
// without allow-same-origin; a srcdoc document inherits this policy, so
// its scripts are blocked twice. Inline styles are allowed because pandas'
// DataFrame HTML carries a <style> block; the page itself never inserts
// markup from user code, only text.
// TerminalPath is the page with its terminal panel open, as
// /v1/shell/terminal-url answers it.
const TerminalPath = "/#terminal"

const webCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data: blob:; font-src 'self'; connect-src 'self'; frame-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// webAsset is one embedded file, ready to serve. Text assets also carry a
// gzip copy (gz, with its own ETag), made once per process: the editor
// bundle is 600 KB as it is and about a third of that gzipped.
type webAsset struct {
	body   []byte
	ctype  string
	etag   string
	gz     []byte
	gzEtag string
}

// webAssetRef finds the page's references to its own assets, so that a
// page opened with ?token=T can load them through the token check.
var webAssetRef = regexp.MustCompile(`((?:src|href)=")(static/[^"?#]+)(")`)

// registerWeb serves the browser notebook page (package web) at / and its
// assets at /static/NAME. Responses carry an ETag and "Cache-Control:
// no-cache" (the browser revalidates, and gets 304 while the binary is the
// same); the page carries webCSP and refuses to be framed.
//
// With a token configured every route needs it, these included. A browser
// opens /?token=T; the page's asset URLs then carry the same ?token=T, the
// page passes it on as "Authorization: Bearer T" on REST calls and as
// ?token=T on the WebSocket, and Referrer-Policy keeps it out of Referer.
//
// The files are read (and gzipped) on the first request for the page or an
// asset, not at start: a daemon whose page nobody opens keeps none of them
// in its heap (1.5 MiB), nor spends the compression at start.
func (s *Server) registerWeb(r *router.Router) {
	names, err := webNames(web.FS())
	if err != nil { // the files are embedded: this is a build problem
		panic("gateway: list the web page's files: " + err.Error())
	}
	if i := sort.SearchStrings(names, "index.html"); i == len(names) || names[i] != "index.html" {
		panic("gateway: load the web page: web/static/index.html is missing")
	}
	page := func(ctx *fasthttp.RequestCtx) {
		index := loadedWebAsset(ctx, "index.html")
		if index == nil {
			return
		}
		webHeaders(ctx, index.ctype)
		ctx.Response.Header.Set("Content-Security-Policy", webCSP)
		ctx.Response.Header.Set("X-Frame-Options", "DENY")
		if tok := ctx.QueryArgs().Peek("token"); s.guard.AuthRequired() && len(tok) > 0 {
			// the guard has checked it; the page echoes the caller's own token (or JWT).
			q := html.EscapeString("?token=" + url.QueryEscape(string(tok)))
			ctx.Response.Header.Set("Cache-Control", "no-store")
			ctx.SetBody(webAssetRef.ReplaceAll(index.body, []byte("${1}${2}"+q+"${3}")))
			return
		}
		serveWebAsset(ctx, index)
	}
	r.GET("/", page)
	r.HEAD("/", page)
	for _, name := range names {
		if name == "index.html" {
			continue
		}
		h := func(ctx *fasthttp.RequestCtx) {
			a := loadedWebAsset(ctx, name)
			if a == nil {
				return
			}
			webHeaders(ctx, a.ctype)
			serveWebAsset(ctx, a)
		}
		r.GET("/static/"+name, h)
		r.HEAD("/static/"+name, h)
	}
}

func webHeaders(ctx *fasthttp.RequestCtx, ctype string) {
	h := &ctx.Response.Header
	h.SetContentType(ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// serveWebAsset answers 304 when the client's copy is current, and the
// gzip copy to a client that accepts it.
func serveWebAsset(ctx *fasthttp.RequestCtx, a *webAsset) {
	body, etag := a.body, a.etag
	if a.gz != nil {
		ctx.Response.Header.Set("Vary", "Accept-Encoding")
		if ctx.Request.Header.HasAcceptEncoding("gzip") {
			body, etag = a.gz, a.gzEtag
			ctx.Response.Header.Set("Content-Encoding", "gzip")
		}
	}
	ctx.Response.Header.Set("ETag", etag)
	if inm := ctx.Request.Header.Peek("If-None-Match"); len(inm) > 0 && etagMatches(inm, etag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetBody(body)
}

// etagMatches reports whether an If-None-Match value names etag (or is *).
func etagMatches(inm []byte, etag string) bool {
	for _, v := range bytes.Split(inm, []byte(",")) {
		v = bytes.TrimPrefix(bytes.TrimSpace(v), []byte("W/"))
		if string(v) == etag || string(v) == "*" {
			return true
		}
	}
	return false
}

// loadedWebAsset is the asset name, loaded with every other on the first
// call; nil, with ctx answered, when the embedded files could not be read
// (a build problem).
func loadedWebAsset(ctx *fasthttp.RequestCtx, name string) *webAsset {
	assets, err := webAssets()
	if a := assets[name]; err == nil && a != nil {
		return a
	}
	if err == nil {
		err = fmt.Errorf("%s is missing", name)
	}
	ctx.Error("the web page's files could not be read: "+err.Error(), fasthttp.StatusServiceUnavailable)
	return nil
}

// webNames lists the files of fsys by slash path, sorted, without reading
// them.
func webNames(fsys fs.FS) ([]string, error) {
	var names []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return err
	})
	sort.Strings(names)
	return names, err
}

// webAssets loads the embedded page once per process: every server of a
// test binary shares the files and their gzip copies.
var webAssets = sync.OnceValues(func() (map[string]*webAsset, error) { return loadWebAssets(web.FS()) })

// loadWebAssets reads every file of fsys, keyed by its slash path, and
// gzips the text ones that shrink by a tenth or more.
func loadWebAssets(fsys fs.FS) (map[string]*webAsset, error) {
	names, err := webNames(fsys)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*webAsset, len(names))
	for _, p := range names {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		sum := sha256.Sum256(b)
		a := &webAsset{body: b, ctype: webContentType(p), etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		if webCompressible(a.ctype) {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression) // a valid level: no error
			_, _ = zw.Write(b)                                       // a bytes.Buffer does not fail
			if err := zw.Close(); err != nil {
				return nil, fmt.Errorf("gzip %s: %w", p, err)
			}
			if buf.Len() < len(b)*9/10 {
				a.gz, a.gzEtag = buf.Bytes(), `"`+hex.EncodeToString(sum[:12])+`-gz"`
			}
		}
		out[p] = a
	}
	return out, nil
}

func webCompressible(ctype string) bool {
	return strings.HasPrefix(ctype, "text/") || ctype == "image/svg+xml" || ctype == "application/json"
}

func webContentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".json":
		return "application/json"
	case ".txt":
		return "text/plain; charset=utf-8"
	}
	return "application/octet-stream"
}
