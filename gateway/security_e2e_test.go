package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"html"
	"image"
	"image/png"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/goccy/go-json"
)

// attackPage is the hostile page: it tries, against aiod at base ("" for
// its own origin, after DNS rebinding), every request a page can send
// without a preflight, each one writing a marker file in dir if it ran:
//
//	fetch-*       fetch with a text/plain JSON body (mode is "no-cors"
//	              cross-origin; "same-origin" after rebinding, where the
//	              page may read the answer)
//	form-plain    a <form enctype="text/plain"> whose one field spells JSON
//	form-url      an empty urlencoded <form> to POST /api/kernels (starts a kernel)
//	form-multi    a multipart <form> uploading a file to /v2/fs/upload
//	websocket     a WebSocket to /v2/code/ws that runs code once open
//
// window.__results maps each attempt to what the page could see of it;
// window.__done is set once every attempt settled.
func attackPage(base, dir, mode string) string {
	m := func(name string) string { return filepath.Join(dir, name) }
	py := func(p string) string { return fmt.Sprintf("open('%s', 'w').write('ran')", p) }
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	plainName := fmt.Sprintf(`{"language":"python","code":"%s","x":"`, py(m("form-plain")))
	var b strings.Builder
	fmt.Fprintf(&b, `<!doctype html><meta charset="utf-8"><title>not aiod</title>
<iframe name="f1"></iframe><iframe name="f2"></iframe><iframe name="f3"></iframe>
<form id="plain" method="POST" enctype="text/plain" target="f1" action="%[1]s/v1/code/execute"><input name="%[2]s" value='"}'></form>
<form id="url" method="POST" target="f2" action="%[1]s/api/kernels"></form>
<form id="multi" method="POST" enctype="multipart/form-data" target="f3" action="%[1]s/v2/fs/upload"><input type="hidden" name="path" value="%[3]s"><input type="file" name="file" id="file"></form>
<script>
'use strict';
const BASE = %[4]s, MODE = %[5]s;
const WS = (BASE || location.origin).replace(/^http/, 'ws');
const R = window.__results = {};
const all = [];
const settle = (name, p) => all.push(p.then((v) => { R[name] = v; }, (e) => { R[name] = 'error: ' + e; }));
const post = (path, body) => fetch(BASE + path, { method: 'POST', mode: MODE, headers: { 'Content-Type': 'text/plain' }, body: JSON.stringify(body) })
  .then((r) => r.type + ' ' + r.status);
settle('fetch-v2-code', post('/v2/code/execute', { language: 'python', code: %[6]s }));
settle('fetch-v1-jupyter', post('/v1/jupyter/execute', { code: %[7]s }));
settle('fetch-v1-nodejs', post('/v1/nodejs/execute', { code: %[8]s }));
settle('fetch-v1-file', post('/v1/file/write', { file: %[9]s, content: 'ran' }));
const into = (form, frame) => new Promise((res) => {
  document.querySelector('iframe[name="' + frame + '"]').onload = () => res('loaded');
  setTimeout(() => res('timeout'), 90000);
  document.getElementById(form).submit();
});
const dt = new DataTransfer();
dt.items.add(new File(['written by a web page\n'], 'marker.txt', { type: 'text/plain' }));
document.getElementById('file').files = dt.files;
settle('form-plain', into('plain', 'f1'));
settle('form-url', into('url', 'f2'));
settle('form-multi', into('multi', 'f3'));
settle('websocket', new Promise((res) => {
  const ws = new WebSocket(WS + '/v2/code/ws');
  let opened = false;
  ws.onopen = () => { opened = true; ws.send(JSON.stringify({ type: 'execute', id: 'x', language: 'python', code: %[10]s })); };
  ws.onmessage = (e) => { const m = JSON.parse(e.data); if (m.type === 'result') { res('opened, ran: ' + m.success); ws.close(); } };
  ws.onclose = (e) => res((opened ? 'opened' : 'refused') + ', closed ' + e.code);
  setTimeout(() => res('timeout'), 90000);
}));
Promise.all(all).then(() => { window.__done = true; });
</script>`,
		base, html.EscapeString(plainName), html.EscapeString(m("form-multi")), js(base), js(mode),
		js(py(m("fetch-v2-code"))), js(py(m("fetch-v1-jupyter"))),
		js(fmt.Sprintf("require('fs').writeFileSync('%s', 'ran')", m("fetch-v1-nodejs"))),
		js(m("fetch-v1-file")), js(py(m("websocket"))))
	return b.String()
}

// attackMarkers are the files attackPage's attempts write when they run.
var attackMarkers = []string{"fetch-v2-code", "fetch-v1-jupyter", "fetch-v1-nodejs", "fetch-v1-file", "form-plain", "form-multi", "websocket"}

// TestBrowserCannotDriveAiod is the attack in headless Chromium. The page
// comes from a second HTTP server on another loopback port. A second
// scenario is DNS rebinding: evil.test resolves to 127.0.0.2, where the
// attacker's server listens on aiod's port number, answers its own page and
// hands every other request on to aiod unchanged (Host: evil.test:PORT,
// Origin http://evil.test:PORT), as after the name is rebound to 127.0.0.1:
// the page is then same-origin with its requests and may read the answers.
// Each attack runs against the default gateway and, as the control that
// proves the attempts arrive and would do harm, against a gateway with
// --allowed-origins '*' and --allowed-hosts '*': there every marker file
// appears; on the default gateway none does, no upload lands, no kernel
// starts. Then the notebook page served by the default gateway, and by one
// with a token, runs a cell over a WebSocket opened with a ticket.
func TestBrowserCannotDriveAiod(t *testing.T) {
	t.Parallel()
	root := kerneltest.Chromium(t, "..")
	def := startServer(t, Config{})
	open := startServer(t, Config{AllowedOrigins: []string{"*"}, AllowedHosts: []string{"*"}})
	dirs := map[string]string{}     // each scenario's marker folder, in its gateway's view
	gws := map[string]*testServer{} // each scenario's gateway
	serveAttack := func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, attackPage(q.Get("aiod"), q.Get("dir"), q.Get("mode")))
	}
	atkURL := serveHTTP(t, "127.0.0.1:0", http.HandlerFunc(serveAttack))
	page := func(gw *testServer, site, aiod, sub, mode string) string {
		d := gw.viewDir(t, "default")
		dirs[sub], gws[sub] = d, gw
		return site + "/attack?" + url.Values{"aiod": {aiod}, "dir": {d}, "mode": {mode}}.Encode()
	}
	// rebound is the attacker's server on 127.0.0.2 at ts's port.
	rebound := func(ts *testServer) string {
		target, _ := url.Parse(ts.URL)
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		px := httputil.NewSingleHostReverseProxy(target) // keeps the browser's Host header
		px.Transport = tr
		mux := http.NewServeMux()
		mux.HandleFunc("/attack", serveAttack)
		mux.Handle("/", px)
		serveHTTP(t, "127.0.0.2"+ts.URL[strings.LastIndexByte(ts.URL, ':'):], mux)
		return "http://evil.test" + ts.URL[strings.LastIndexByte(ts.URL, ':'):]
	}

	kernelsBefore, openBefore := def.kernelCount(t), open.kernelCount(t)
	seen := runCSRF(t, root, map[string]any{"resolve": "evil.test 127.0.0.2", "scenarios": []map[string]string{
		{"name": "cross-origin", "kind": "attack", "page": page(def, atkURL, def.URL, "cross-origin", "no-cors")},
		{"name": "cross-origin-control", "kind": "attack", "page": page(open, atkURL, open.URL, "cross-origin-control", "no-cors")},
		{"name": "rebinding", "kind": "attack", "page": page(def, rebound(def), "", "rebinding", "same-origin")},
		{"name": "rebinding-control", "kind": "attack", "page": page(open, rebound(open), "", "rebinding-control", "same-origin")},
	}})
	results := func(name string) map[string]string {
		var r map[string]string
		if err := json.Unmarshal(seen[name], &r); err != nil {
			t.Errorf("%s: no results (%v)", name, err)
		}
		return r
	}
	markers := func(sub string) (have, missing []string) {
		for _, m := range attackMarkers {
			if _, err := os.Stat(gws[sub].hostPath(t, "default", filepath.Join(dirs[sub], m))); err == nil {
				have = append(have, m)
			} else {
				missing = append(missing, m)
			}
		}
		return
	}
	for _, sub := range []string{"cross-origin-control", "rebinding-control"} {
		if _, missing := markers(sub); len(missing) > 0 {
			t.Errorf("%s: the attempts %v wrote nothing even with every origin and host allowed, so the test does not exercise them (the page saw %v)", sub, missing, results(sub))
		}
	}
	for _, sub := range []string{"cross-origin", "rebinding"} {
		r := results(sub)
		if have, _ := markers(sub); len(have) > 0 {
			t.Errorf("%s: the attempts %v ran on the default gateway (the page saw %v)", sub, have, r)
		}
		if !strings.HasPrefix(r["websocket"], "refused") {
			t.Errorf("%s: the WebSocket: %q, want it refused", sub, r["websocket"])
		}
	}
	rb, rbc := results("rebinding"), results("rebinding-control")
	for _, k := range []string{"fetch-v2-code", "fetch-v1-jupyter", "fetch-v1-nodejs", "fetch-v1-file"} {
		if rb[k] != "basic 403" || rbc[k] != "basic 200" {
			t.Errorf("rebinding, %s: the page read %q (control %q), want basic 403 (basic 200)", k, rb[k], rbc[k])
		}
	}
	if n := def.kernelCount(t); n != kernelsBefore {
		t.Errorf("the urlencoded forms started kernels on the default gateway: %d kernels, %d before", n, kernelsBefore)
	}
	if n := open.kernelCount(t); n < openBefore+2 {
		t.Errorf("the control's urlencoded forms did not start kernels: %d, %d before", n, openBefore)
	}

	const tok = "e2e-ticket-s3cret"
	tokd := startServer(t, Config{Token: tok})
	seen = runCSRF(t, root, map[string]any{"scenarios": []map[string]string{
		{"name": "notebook", "kind": "notebook", "page": def.URL + "/"},
		{"name": "notebook-token", "kind": "notebook", "page": tokd.URL + "/?token=" + tok},
	}})
	for _, name := range []string{"notebook", "notebook-token"} {
		var nb struct {
			Output  string   `json:"output"`
			Sockets []string `json:"sockets"`
		}
		if err := json.Unmarshal(seen[name], &nb); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !strings.Contains(nb.Output, "42") || len(nb.Sockets) == 0 {
			t.Errorf("%s: output %q, sockets %v", name, nb.Output, nb.Sockets)
		}
		for _, s := range nb.Sockets {
			if !strings.Contains(s, "?ticket=") || strings.Contains(s, "token=") {
				t.Errorf("%s: the page opened %s, want a ticket and no token in the URL", name, s)
			}
		}
	}
}

// serveHTTP serves h on addr until the test ends and returns its URL.
func serveHTTP(t *testing.T, addr string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// runCSRF runs web/e2e/csrf.js with cfg and returns what each scenario
// reported; a FAIL line fails the test.
func runCSRF(t *testing.T, root string, cfg any) map[string]json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	arg, _ := json.Marshal(cfg)
	cmd, stderr := kerneltest.Node(ctx, root, filepath.Join("web", "e2e", "csrf.js"), string(arg))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node web/e2e/csrf.js: %v", err)
	}
	seen := map[string]json.RawMessage{}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		t.Log("csrf.js: " + line)
		switch {
		case strings.HasPrefix(line, "ok "):
			name, js, _ := strings.Cut(strings.TrimPrefix(line, "ok "), " ")
			seen[name] = json.RawMessage(js)
		case strings.HasPrefix(line, "FAIL "):
			t.Error(strings.TrimPrefix(line, "FAIL "))
		}
	}
	err = cmd.Wait()
	if stderr.String() != "" {
		t.Logf("csrf.js stderr:\n%s", stderr.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("node web/e2e/csrf.js did not finish in time: %v", ctx.Err())
	}
	if err != nil && !t.Failed() {
		t.Errorf("node web/e2e/csrf.js: %v", err)
	}
	return seen
}

// readsPage is a page that tries to read aiod's answers by embedding them,
// which a browser does without CORS: a <script> whose code sets
// window.__pwned, an <img>, and a probe that tells an existing file from a
// missing one by whether a <script> loads. base is aiod's URL ("" for the
// page's own origin); js, png and missing are paths on aiod's machine.
// The link #dl navigates to the download of js.
func readsPage(base, js, png, missing string) string {
	q := func(route, p string) string { return base + route + "?path=" + url.QueryEscape(p) }
	jsq := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	return fmt.Sprintf(`<!doctype html><meta charset="utf-8"><title>not aiod</title>
<a id="dl" href="%s">download</a>
<script>
'use strict';
window.__pwned = false;
const R = window.__results = {};
const all = [];
const settle = (name, p) => all.push(p.then((v) => { R[name] = v; }));
const script = (src) => new Promise((res) => {
  const s = document.createElement('script');
  s.onload = () => res('load');
  s.onerror = () => res('error');
  s.src = src;
  document.head.appendChild(s);
  setTimeout(() => res('timeout'), 30000);
});
const img = (src) => new Promise((res) => {
  const i = new Image();
  i.onload = () => res('load ' + i.naturalWidth);
  i.onerror = () => res('error ' + i.naturalWidth);
  i.src = src;
  setTimeout(() => res('timeout'), 30000);
});
settle('script-v2', script(%s));
settle('script-v1', script(%s));
settle('img-v2', img(%s));
settle('img-v1', img(%s));
settle('probe-existing', script(%s));
settle('probe-missing', script(%s));
Promise.all(all).then(() => { R.pwned = String(window.__pwned); window.__done = true; });
</script>`, html.EscapeString(q("/v2/fs/download", js)),
		jsq(q("/v2/fs/download", js)), jsq(q("/v1/file/download", js)),
		jsq(q("/v2/fs/download", png)), jsq(q("/v1/file/download", png)),
		jsq(q("/v2/fs/download", js)), jsq(q("/v2/fs/download", missing)))
}

// TestBrowserCannotReadAiod runs, in headless Chromium, a page on another
// port of 127.0.0.1 (same-site, another origin) that embeds files from a
// gateway with default flags: a <script> from the download routes must not
// run, an <img> must not load, and the existence probe must answer the
// same for an existing and a missing file. Following a link to a download
// still works. The control is the same page served from aiod's own origin
// (a proxy in front of the gateway serves it and passes everything else
// on): there the script runs, the image loads and the probe tells the
// files apart, which shows the attempts are real.
func TestBrowserCannotReadAiod(t *testing.T) {
	t.Parallel()
	root := kerneltest.Chromium(t, "..")
	def := startServer(t, Config{})
	dir := def.viewDir(t, "default")
	js, pngFile, missing := filepath.Join(dir, "secret.js"), filepath.Join(dir, "secret.png"), filepath.Join(dir, "missing.js")
	const jsText = "window.__pwned = true;\n"
	if err := os.WriteFile(def.hostPath(t, "default", js), []byte(jsText), 0o644); err != nil {
		t.Fatal(err)
	}
	var pngBuf bytes.Buffer
	im := image.NewRGBA(image.Rect(0, 0, 4, 3))
	for i := range im.Pix {
		im.Pix[i] = 0xff
	}
	if err := png.Encode(&pngBuf, im); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(def.hostPath(t, "default", pngFile), pngBuf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	// The attacker's page, on another port.
	other := serveHTTP(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, readsPage(def.URL, js, pngFile, missing))
	}))
	// The control: the page from aiod's own origin, through a proxy.
	target, _ := url.Parse(def.URL)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	px := httputil.NewSingleHostReverseProxy(target)
	px.Transport = tr
	mux := http.NewServeMux()
	mux.HandleFunc("/reads", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, readsPage("", js, pngFile, missing))
	})
	mux.Handle("/", px)
	same := serveHTTP(t, "127.0.0.1:0", mux)

	seen := runCSRF(t, root, map[string]any{"scenarios": []map[string]string{
		{"name": "other-origin", "kind": "reads", "page": other + "/reads"},
		{"name": "same-origin", "kind": "reads", "page": same + "/reads"},
	}})
	results := func(name string) map[string]string {
		var r map[string]string
		if err := json.Unmarshal(seen[name], &r); err != nil {
			t.Fatalf("%s: no results (%v)", name, err)
		}
		return r
	}
	o, s := results("other-origin"), results("same-origin")
	t.Logf("another origin saw %v; aiod's own origin saw %v", o, s)
	for k, want := range map[string]string{"script-v2": "load", "script-v1": "load", "img-v2": "load 4", "img-v1": "load 4",
		"probe-existing": "load", "probe-missing": "error", "pwned": "true", "download": jsText} {
		if s[k] != want {
			t.Errorf("control, same origin, %s: %q, want %q (the attempt does not work even where it should)", k, s[k], want)
		}
	}
	for k, want := range map[string]string{"script-v2": "error", "script-v1": "error", "img-v2": "error 0", "img-v1": "error 0",
		"pwned": "false", "download": jsText} {
		if o[k] != want {
			t.Errorf("another origin, %s: %q, want %q", k, o[k], want)
		}
	}
	if o["probe-existing"] != o["probe-missing"] {
		t.Errorf("another origin tells an existing file (%s) from a missing one (%s)", o["probe-existing"], o["probe-missing"])
	}
}
