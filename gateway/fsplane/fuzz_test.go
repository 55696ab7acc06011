package fsplane

import (
	"strings"
	"testing"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
)

// fuzzRoutes are the JSON routes the fuzzers drive. "$D" in a seed stands
// for the fuzz's scratch folder, which is also Root, so no input can touch
// anything outside it.
var fuzzRoutes = []string{
	"/v1/file/write", "/v1/file/read", "/v1/file/list", "/v1/file/replace", "/v1/file/search",
	"/v1/file/find", "/v1/file/grep", "/v1/file/glob", "/v1/file/str_replace_editor",
	"/v2/fs/write", "/v2/fs/read",
}

// serveInProcess runs one request through the router without a network and
// fails on a 5xx or a panic.
func serveInProcess(t *testing.T, h fasthttp.RequestHandler, method, uri string, body []byte) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	ctx.Request.Header.SetContentType("application/json")
	ctx.Request.SetBody(body)
	h(&ctx)
	if code := ctx.Response.StatusCode(); code >= 500 {
		t.Fatalf("%s %s with %q: status %d: %s", method, uri, body, code, ctx.Response.Body())
	}
}

func fuzzHandler(dir string) fasthttp.RequestHandler {
	r := router.New()
	Register(r, Config{Root: dir, Workspace: dir})
	return r.Handler
}

func addSeeds(f *testing.F, dir string, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(strings.ReplaceAll(s, "$D", dir)))
	}
}

// FuzzV1Write feeds random bodies to POST /v1/file/write.
func FuzzV1Write(f *testing.F) {
	dir := f.TempDir()
	h := fuzzHandler(dir)
	addSeeds(f, dir, "", "null", "{}", `{"file":"$D/a.txt","content":"hi"}`,
		`{"file":"$D/b.bin","content":"aGk=","encoding":"base64","append":true}`,
		`{"file":"$D/c","content":"\u00ff","encoding":"raw","leading_newline":1}`,
		`{"file":"$D","content":"x"}`, `{"file":"rel","content":null}`, `{"file":"$D/x","content":5}`,
		`{"file":[],"content":{}}`, `{"file":"$D/\u0000","content":""}`, `[`, `"str"`)
	f.Fuzz(func(t *testing.T, body []byte) {
		serveInProcess(t, h, "POST", "/v1/file/write", body)
	})
}

// FuzzFileRoutes feeds random bodies to every JSON route, the first byte
// picking the route.
func FuzzFileRoutes(f *testing.F) {
	dir := f.TempDir()
	h := fuzzHandler(dir)
	writeSeedFiles(f, dir)
	for i := range fuzzRoutes {
		for _, s := range []string{`{}`, `{"file":"$D/t.txt","path":"$D","regex":"a","pattern":"**","glob":"*"}`,
			`{"command":"view","path":"$D/t.txt","view_range":[1,-1]}`,
			`{"command":"str_replace","path":"$D/t.txt","old_str":"a","new_str":"b","replace_mode":"ALL"}`,
			`{"path":"$D","pattern":"a","multiline":true,"context_before":20,"max_file_size":"1K"}`} {
			f.Add(byte(i), []byte(strings.ReplaceAll(s, "$D", dir)))
		}
	}
	f.Fuzz(func(t *testing.T, route byte, body []byte) {
		uri := fuzzRoutes[int(route)%len(fuzzRoutes)]
		serveInProcess(t, h, "POST", uri, body)
	})
}

func writeSeedFiles(f *testing.F, dir string) {
	serve := fuzzHandler(dir)
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/file/write")
	ctx.Request.SetBody([]byte(`{"file":"` + dir + `/t.txt","content":"abc\nbca\n"}`))
	serve(&ctx)
	if ctx.Response.StatusCode() != 200 {
		f.Fatalf("seed write: %s", ctx.Response.Body())
	}
}
