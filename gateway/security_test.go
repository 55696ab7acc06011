package gateway

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/coder/websocket"
	"github.com/goccy/go-json"
	"github.com/golang-jwt/jwt/v5"
)

// These tests drive the guard (package guard) through a live gateway with
// real kernels and Node.js: what a web page on another origin can send
// without a preflight must answer 403 and change nothing on disk, a
// foreign Host is refused on REST and WebSocket, and the credentials
// (token, JWT, tickets) work as documented.

// secReq is one request with full control of its headers.
func (ts *testServer) secReq(t testing.TB, method, path, ctype string, body []byte, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// encodings are the bodies a page can send cross-origin without a
// preflight: the fields as JSON text/plain (what an HTML form with
// enctype=text/plain or fetch no-cors carries), urlencoded and multipart;
// with a file part for the upload routes.
func encodings(t testing.TB, fields map[string]string, file bool) map[string]struct {
	ctype string
	body  []byte
} {
	t.Helper()
	out := map[string]struct {
		ctype string
		body  []byte
	}{}
	j, _ := json.Marshal(fields)
	out["text/plain"] = struct {
		ctype string
		body  []byte
	}{"text/plain;charset=UTF-8", j}
	form := url.Values{}
	for k, v := range fields {
		form.Set(k, v)
	}
	out["urlencoded"] = struct {
		ctype string
		body  []byte
	}{"application/x-www-form-urlencoded", []byte(form.Encode())}
	out["multipart"] = multipartBody(t, fields, file)
	return out
}

func multipartBody(t testing.TB, fields map[string]string, file bool) struct {
	ctype string
	body  []byte
} {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for k, v := range fields {
		_ = w.WriteField(k, v)
	}
	if file {
		fw, err := w.CreateFormFile("file", "marker.txt")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fw.Write([]byte("written by a web page\n"))
	}
	_ = w.Close()
	return struct {
		ctype string
		body  []byte
	}{w.FormDataContentType(), b.Bytes()}
}

// kernelCount is the number of kernels GET /api/kernels lists.
func (ts *testServer) kernelCount(t testing.TB) int {
	t.Helper()
	st, _, body := ts.secReq(t, "GET", "/api/kernels", "", nil, nil)
	var ks []map[string]any
	if st != 200 || json.Unmarshal([]byte(body), &ks) != nil {
		t.Fatalf("GET /api/kernels: %d %s", st, body)
	}
	return len(ks)
}

// TestCrossOriginWritesRefused sends, on every state-changing route
// family, the requests a page on another origin can send without a
// preflight, and checks each answers 403 and leaves no trace: the marker
// file the code would write does not exist, the upload target does not
// exist, no kernel was started. The same request from the page's own
// origin, and without any Origin, does its work: the check can see it.
func TestCrossOriginWritesRefused(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	dir := ts.viewDir(t, "default") // the caller's view: runtimes and the plane write there
	host := func(p string) string { return ts.hostPath(t, "default", p) }
	self := map[string]string{"Origin": ts.URL}
	foreign := []string{"http://evil.example", "null", "http://127.0.0.1:1", "http://localhost" + ts.URL[strings.LastIndexByte(ts.URL, ':'):]}

	type family struct {
		name, method, path string
		fields             map[string]string
		file               bool
		effect             func(body string) bool // did the request do its work?
		undo               func()
	}
	exists := func(p string) func(string) bool {
		return func(string) bool { _, err := os.Stat(host(p)); return err == nil }
	}
	remove := func(p string) func() { return func() { os.Remove(host(p)) } }
	mark := func(name string) string { return filepath.Join(dir, name) }
	pyWrite := func(p string) string { return fmt.Sprintf("open(%q, 'w').write('ran')", p) }
	kernels := ts.kernelCount(t)
	var fams []family
	for _, f := range []struct{ name, path, lang string }{
		{"v2 code", "/v2/code/execute", "python"},
		{"v1 code", "/v1/code/execute", "python"},
		{"v1 jupyter", "/v1/jupyter/execute", ""},
	} {
		p := mark(strings.ReplaceAll(f.name, " ", "-"))
		fields := map[string]string{"code": pyWrite(p)}
		if f.lang != "" {
			fields["language"] = f.lang
		}
		fams = append(fams, family{f.name, "POST", f.path, fields, false, exists(p), remove(p)})
	}
	nodeMark := mark("v1-nodejs")
	fams = append(fams,
		family{"v1 nodejs", "POST", "/v1/nodejs/execute", map[string]string{"code": fmt.Sprintf("require('fs').writeFileSync(%q, 'ran')", nodeMark)}, false, exists(nodeMark), remove(nodeMark)},
		family{"v2 fs write", "POST", "/v2/fs/write", map[string]string{"path": mark("v2-write"), "content": "x"}, false, exists(mark("v2-write")), remove(mark("v2-write"))},
		family{"v2 fs upload", "POST", "/v2/fs/upload", map[string]string{"path": mark("v2-upload")}, true, exists(mark("v2-upload")), remove(mark("v2-upload"))},
		family{"v1 file write", "POST", "/v1/file/write", map[string]string{"file": mark("v1-write"), "content": "x"}, false, exists(mark("v1-write")), remove(mark("v1-write"))},
		family{"v1 file upload", "POST", "/v1/file/upload", map[string]string{"path": mark("v1-upload")}, true, exists(mark("v1-upload")), remove(mark("v1-upload"))},
		family{"api kernels", "POST", "/api/kernels", map[string]string{}, false,
			func(string) bool { return ts.kernelCount(t) > kernels },
			func() {
				var ks []map[string]any
				_, _, b := ts.secReq(t, "GET", "/api/kernels", "", nil, nil)
				_ = json.Unmarshal([]byte(b), &ks)
				for _, k := range ks {
					ts.secReq(t, "DELETE", "/api/kernels/"+k["id"].(string), "", nil, nil)
				}
			}},
		family{"tickets", "POST", "/tickets", map[string]string{}, false,
			func(b string) bool { return strings.Contains(b, `"ticket"`) }, func() {}},
	)

	for _, f := range fams {
		t.Run(f.name, func(t *testing.T) {
			// The control: the page's own origin gets the work done.
			ctl := multipartBody(t, f.fields, f.file)
			if !f.file {
				j, _ := json.Marshal(f.fields)
				ctl.ctype, ctl.body = "application/json", j
			}
			st, _, body := ts.secReq(t, f.method, f.path, ctl.ctype, ctl.body, self)
			if st >= 300 || !f.effect(body) {
				t.Fatalf("same-origin %s %s: %d, work done %v: %s", f.method, f.path, st, f.effect(body), body)
			}
			f.undo()
			if f.effect("") {
				t.Fatalf("the control's effect could not be undone")
			}
			for enc, e := range encodings(t, f.fields, f.file) {
				for _, o := range foreign {
					st, h, body := ts.secReq(t, f.method, f.path, e.ctype, e.body, map[string]string{"Origin": o})
					if st != 403 || !strings.Contains(body, "--allowed-origins") || h.Get("Access-Control-Allow-Origin") != "" {
						t.Errorf("%s from %q: %d %v %s", enc, o, st, h.Get("Access-Control-Allow-Origin"), body)
					}
				}
			}
			if f.effect("") {
				t.Errorf("a cross-origin request did its work")
			}
			f.undo()
		})
	}

	// DELETE from another origin leaves the file in place.
	victim := mark("keep-me")
	if err := os.WriteFile(host(victim), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, _, body := ts.secReq(t, "DELETE", "/v2/fs/delete?path="+url.QueryEscape(victim), "", nil, map[string]string{"Origin": "http://evil.example"})
	if _, err := os.Stat(host(victim)); st != 403 || err != nil {
		t.Errorf("cross-origin DELETE: %d %s; the file: %v", st, body, err)
	}
	// Nothing the cross-origin requests carried left a file: the marker
	// folder holds only the file put there above.
	ents, _ := os.ReadDir(host(dir))
	if len(ents) != 1 || ents[0].Name() != "keep-me" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the marker folder holds %v, want only keep-me", names)
	}
}

// TestCrossOriginWebSocketRefused: an upgrade from another origin, or with
// another Host, is refused on both WebSocket routes before it runs anything.
func TestCrossOriginWebSocketRefused(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	st, _, body := ts.secReq(t, "POST", "/api/kernels", "application/json", []byte(`{}`), nil)
	var k map[string]any
	if st != 201 && st != 200 || json.Unmarshal([]byte(body), &k) != nil {
		t.Fatalf("POST /api/kernels: %d %s", st, body)
	}
	id := k["id"].(string)
	defer ts.secReq(t, "DELETE", "/api/kernels/"+id, "", nil, nil)
	port := ts.URL[strings.LastIndexByte(ts.URL, ':'):]
	for _, path := range []string{"/v2/code/ws", "/api/kernels/" + id + "/channels"} {
		for _, tc := range []struct {
			name string
			hdr  http.Header
			host string
			want int
		}{
			{"no Origin", nil, "", 101},
			{"own origin", http.Header{"Origin": {ts.URL}}, "", 101},
			{"another origin", http.Header{"Origin": {"http://evil.example"}}, "", 403},
			{"null origin", http.Header{"Origin": {"null"}}, "", 403},
			{"rebinding: Origin and Host both the attacker's", http.Header{"Origin": {"http://evil.example" + port}}, "evil.example" + port, 403},
			{"foreign Host, no Origin", nil, "evil.example" + port, 403},
		} {
			got := wsDialStatus(t, ts.wsURL(path), tc.hdr, tc.host)
			if got != tc.want {
				t.Errorf("%s, %s: HTTP %d, want %d", path, tc.name, got, tc.want)
			}
		}
	}
}

// wsDialStatus dials a WebSocket (with Host set to host when given) and
// returns 101 when it opened, else the HTTP status of the refusal.
func wsDialStatus(t testing.TB, u string, hdr http.Header, host string) int {
	t.Helper()
	if hdr == nil {
		hdr = http.Header{}
	}
	opts := &websocket.DialOptions{HTTPHeader: hdr}
	if host != "" {
		opts.HTTPClient = &http.Client{Transport: hostRewriter{host}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, u, opts)
	if err == nil {
		_ = c.Close(websocket.StatusNormalClosure, "")
		return 101
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	return resp.StatusCode
}

// hostRewriter sends requests with another Host header, as a browser does
// after DNS rebinding: the connection goes to 127.0.0.1, Host names the
// attacker's domain.
type hostRewriter struct{ host string }

func (h hostRewriter) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = h.host
	return http.DefaultTransport.RoundTrip(r)
}

// TestForeignHostRefused: DNS rebinding sends the attacker's name as Host;
// every route answers 403 naming --allowed-hosts, /healthz included, with
// or without an Origin. --allowed-hosts lets a name through.
func TestForeignHostRefused(t *testing.T) {
	t.Parallel()
	var logs syncLog
	ts := startServer(t, Config{AllowedHosts: []string{"aiod.internal"}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	port := ts.URL[strings.LastIndexByte(ts.URL, ':'):]
	for _, host := range []string{"evil.example" + port, "evil.example", "127.0.0.1.nip.io" + port, "localhost.evil.example" + port} {
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/v2/code/sessions", ""},
			{"GET", "/healthz", ""},
			{"GET", "/", ""},
			{"POST", "/v2/code/execute", `{"language":"python","code":"1"}`},
		} {
			st, _, body := ts.secReq(t, r.method, r.path, "application/json", []byte(r.body), map[string]string{"Host": host})
			if st != 403 || !strings.Contains(body, "--allowed-hosts") {
				t.Errorf("%s %s with Host %q: %d %s", r.method, r.path, host, st, body)
			}
		}
	}
	for _, host := range []string{"aiod.internal" + port, "AIOD.internal.", "localhost" + port, "[::1]" + port} {
		if st, _, body := ts.secReq(t, "GET", "/v2/code/sessions", "", nil, map[string]string{"Host": host}); st != 200 {
			t.Errorf("Host %q: %d %s", host, st, body)
		}
	}
	if l := logs.String(); !strings.Contains(l, "request refused") || !strings.Contains(l, "status=403") || !strings.Contains(l, "path=/healthz") || !strings.Contains(l, "remote=127.0.0.1:") {
		t.Errorf("the refusals are not logged with route, reason and remote address:\n%s", l)
	}
}

// syncLog is a log sink for the server's goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCORSPreflight: an allowed origin gets a full preflight answer, any
// other none; OPTIONS no longer answers every origin.
func TestCORSPreflight(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{AllowedOrigins: []string{"https://app.example"}})
	pre := func(origin string) (int, http.Header) {
		st, h, _ := ts.secReq(t, "OPTIONS", "/v2/code/execute", "", nil, map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type,authorization",
		})
		return st, h
	}
	st, h := pre("https://app.example")
	if st != 204 || h.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "authorization") {
		t.Errorf("allowed preflight: %d %v", st, h)
	}
	st, h = pre("http://evil.example")
	if st != 403 || h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("foreign preflight: %d %v", st, h)
	}
	// The allowed origin's real request runs and may be read.
	st, h, body := ts.secReq(t, "POST", "/v2/code/execute", "application/json", []byte(`{"language":"python","code":"print(6*7)"}`), map[string]string{"Origin": "https://app.example"})
	if st != 200 || !strings.Contains(body, `42\n`) || h.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("allowed cross-origin execute: %d %v %s", st, h.Get("Access-Control-Allow-Origin"), body)
	}
}

// testRSAKey is generated once: RSA generation is slow under -race.
var testRSAKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

func pemOf(t testing.TB, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func signJWT(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestJWTAndTickets runs code with a JWT (RS256, the key given as base64
// PEM as the AIO sandbox does), refuses the bad ones with
// WWW-Authenticate, keeps the token working beside it, and uses tickets on
// the WebSocket: once, within their TTL.
func TestJWTAndTickets(t *testing.T) {
	t.Parallel()
	key := testRSAKey()
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncLog
	clk := kerneltest.NewClock(time.Now())
	ts := startServer(t, Config{
		Token: "s3cret", JWTPublicKey: base64.StdEncoding.EncodeToString([]byte(pemOf(t, &key.PublicKey))),
		TicketTTL: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Clock: clk.Now,
	})
	now := time.Now()
	good := jwt.MapClaims{"sub": "agent-7", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
	valid := signJWT(t, jwt.SigningMethodRS256, key, good)
	parts := strings.Split(valid, ".")
	bad := map[string]string{
		"expired":          signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": "a", "exp": now.Add(-time.Hour).Unix()}),
		"without exp":      signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": "a"}),
		"not yet valid":    signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"exp": now.Add(time.Hour).Unix(), "nbf": now.Add(time.Hour).Unix()}),
		"unsigned":         parts[0] + "." + parts[1] + ".",
		"wrongly signed":   signJWT(t, jwt.SigningMethodRS256, other, good),
		"alg none":         signJWT(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good),
		"HS256 confusion":  signJWT(t, jwt.SigningMethodHS256, []byte(pemOf(t, &key.PublicKey)), good),
		"payload swapped":  parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"root","exp":4102444800}`)) + "." + parts[2],
		"not a credential": "hello",
	}
	run := `{"language":"python","code":"print(6*7)"}`
	for name, tok := range bad {
		st, h, body := ts.secReq(t, "POST", "/v2/code/execute", "application/json", []byte(run), map[string]string{"Authorization": "Bearer " + tok})
		if st != 401 || h.Get("WWW-Authenticate") != `Bearer realm="aiod"` || strings.Contains(body, "42") {
			t.Errorf("%s JWT: %d %q %s", name, st, h.Get("WWW-Authenticate"), body)
		}
	}
	for name, auth := range map[string]string{"JWT": "Bearer " + valid, "token": "Bearer s3cret"} {
		st, _, body := ts.secReq(t, "POST", "/v2/code/execute", "application/json", []byte(run), map[string]string{"Authorization": auth})
		if st != 200 || !strings.Contains(body, `42\n`) {
			t.Errorf("%s: %d %s", name, st, body)
		}
	}

	// A ticket opens one WebSocket, once.
	ticket := func(auth string) string {
		st, _, body := ts.secReq(t, "POST", "/tickets", "", nil, map[string]string{"Authorization": auth})
		var m struct {
			Ticket    string `json:"ticket"`
			ExpiresIn int    `json:"expires_in"`
		}
		if st != 200 || json.Unmarshal([]byte(body), &m) != nil || m.Ticket == "" || m.ExpiresIn != 1 {
			t.Fatalf("POST /tickets: %d %s", st, body)
		}
		return m.Ticket
	}
	tk := ticket("Bearer " + valid)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, ts.wsURL("/v2/code/ws?ticket="+tk), nil)
	if err != nil {
		t.Fatalf("WebSocket with a fresh ticket: %v", err)
	}
	sendJSON(t, c, map[string]any{"type": "execute", "id": "t1", "language": "python", "code": "print(6*7)"})
	msgs := readUntil(t, c, "result", "t1", time.Minute)
	if r := msgs[len(msgs)-1].m; r["success"] != true {
		t.Errorf("execute over a ticket's socket: %v", r)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	if st := wsDialStatus(t, ts.wsURL("/v2/code/ws?ticket="+tk), nil, ""); st != 401 {
		t.Errorf("the same ticket again: HTTP %d, want 401", st)
	}
	// A REST call with a ticket works once too.
	tk2 := ticket("Bearer s3cret")
	if st, _, body := ts.secReq(t, "GET", "/v2/code/sessions?ticket="+tk2, "", nil, nil); st != 200 {
		t.Errorf("GET with a ticket: %d %s", st, body)
	}
	if st, _, _ := ts.secReq(t, "GET", "/v2/code/sessions?ticket="+tk2, "", nil, nil); st != 401 {
		t.Errorf("GET with a used ticket: %d", st)
	}
	// Past its TTL a ticket fails.
	tk3 := ticket("Bearer s3cret")
	clk.Add(1200 * time.Millisecond)
	if st := wsDialStatus(t, ts.wsURL("/v2/code/ws?ticket="+tk3), nil, ""); st != 401 {
		t.Errorf("a ticket past its TTL: HTTP %d, want 401", st)
	}
	// No credential reaches the log.
	l := logs.String()
	for _, secret := range append([]string{"s3cret", valid, tk, tk2, tk3}, bad["expired"], bad["wrongly signed"]) {
		if strings.Contains(l, secret) {
			t.Errorf("the log carries a credential:\n%s", l)
			break
		}
	}
	if !strings.Contains(l, "status=401") || !strings.Contains(l, "expired") {
		t.Errorf("401s are not logged with their reason:\n%s", l)
	}
}

// TestJWTES256 accepts ES256 with a P-256 key given as PEM, and refuses an
// RS256 token on it.
func TestJWTES256(t *testing.T) {
	t.Parallel()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{JWTPublicKey: pemOf(t, &ec.PublicKey)})
	exp := time.Now().Add(time.Hour).Unix()
	ok := signJWT(t, jwt.SigningMethodES256, ec, jwt.MapClaims{"sub": "es", "exp": exp})
	if st, _, body := ts.secReq(t, "GET", "/v2/code/sessions", "", nil, map[string]string{"Authorization": "Bearer " + ok}); st != 200 {
		t.Errorf("ES256: %d %s", st, body)
	}
	rs := signJWT(t, jwt.SigningMethodRS256, testRSAKey(), jwt.MapClaims{"sub": "es", "exp": exp})
	if st, _, body := ts.secReq(t, "GET", "/v2/code/sessions", "", nil, map[string]string{"Authorization": "Bearer " + rs}); st != 401 || !strings.Contains(body, "ES256") {
		t.Errorf("RS256 on an ES256 key: %d %s", st, body)
	}
	if st, _, _ := ts.secReq(t, "GET", "/healthz", "", nil, nil); st != 200 {
		t.Errorf("/healthz without credentials: %d", st)
	}
}

// TestNonLoopbackListen: on 0.0.0.0 without credentials the gateway warns,
// and the machine's own name is an allowed Host.
func TestNonLoopbackListen(t *testing.T) {
	t.Parallel()
	var logs syncLog
	srv, err := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), KernelStartTimeout: 120 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	ts := &testServer{Server: srv, URL: fmt.Sprintf("http://127.0.0.1:%d", port), client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{}}}
	defer ts.client.CloseIdleConnections()
	name, _ := os.Hostname()
	if st, _, body := ts.secReq(t, "GET", "/healthz", "", nil, map[string]string{"Host": fmt.Sprintf("%s:%d", name, port)}); st != 200 {
		t.Errorf("Host %s (the machine's name): %d %s", name, st, body)
	}
	if st, _, _ := ts.secReq(t, "GET", "/healthz", "", nil, map[string]string{"Host": "evil.example"}); st != 403 {
		t.Errorf("Host evil.example: %d", st)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "AIO_TOKEN") || !strings.Contains(l, "--jwt-public-key") {
		t.Errorf("no warning about listening beyond loopback without credentials:\n%s", l)
	}
}
