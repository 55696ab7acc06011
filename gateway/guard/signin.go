package guard

import (
	"bytes"
	"html"

	"github.com/valyala/fasthttp"
)

// signInCSP is the sign-in page's Content-Security-Policy: no script, its
// own inline style, and a form that may only go to the daemon itself.
const signInCSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// wantsSignInPage reports whether a refused request is a browser opening
// the notebook page: GET or HEAD of / that accepts HTML. Everything else
// (the API, scripts, curl) gets the JSON refusal.
func wantsSignInPage(ctx *fasthttp.RequestCtx) bool {
	if !ctx.IsGet() && !ctx.IsHead() {
		return false
	}
	return string(RoutePath(ctx)) == "/" && bytes.Contains(ctx.Request.Header.Peek("Accept"), []byte("text/html"))
}

// signInPage answers a browser refused at / with a small page that says
// how to get in: a token field (which opens /?token=T), or the URL itself.
func signInPage(ctx *fasthttp.RequestCtx, why string) {
	h := &ctx.Response.Header
	h.Set("Content-Security-Policy", signInCSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(fasthttp.StatusUnauthorized)
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBodyString(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>aiod: sign in</title>
<style>body{font:16px system-ui,sans-serif;max-width:34em;margin:4em auto;padding:0 1em;color:#222}
input{font:inherit;padding:.3em;width:20em;max-width:100%}button{font:inherit;padding:.3em .8em}
code{background:#f2f2f2;padding:0 .2em}.why{color:#a00}</style></head>
<body><h1>aiod needs a token</h1>
<p class="why">` + html.EscapeString(why) + `.</p>
<form method="get" action="/"><label>Token or JWT <input name="token" type="password" autocomplete="current-password" autofocus required></label>
<button type="submit">Open the notebook</button></form>
<p>Or open <code>/?token=&lt;token&gt;</code> with the token the daemon was started with
(<code>AIO_TOKEN</code> or <code>--token-file</code>), or a JWT it accepts (<code>--jwt-public-key</code>).
The API itself wants <code>Authorization: Bearer &lt;token&gt;</code>.</p>
</body></html>
`)
}
