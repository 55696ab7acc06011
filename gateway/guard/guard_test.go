package guard

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"
)

// lockedBuffer collects log output from the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// guarded is a real fasthttp server on a loopback port with the guard in
// front of a handler that counts the requests that reach it and answers
// the caller's key.
type guarded struct {
	g       *Guard
	url     string
	host    string
	reached atomic.Int32
	log     *lockedBuffer
}

func startGuarded(t *testing.T, cfg Config) *guarded {
	t.Helper()
	gs := &guarded{log: &lockedBuffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(gs.log, nil))
	cfg.OpenPaths = []string{"/healthz"}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs.g = g
	mux := func(ctx *fasthttp.RequestCtx) {
		if ctx.IsPost() && string(ctx.Path()) == TicketsPath {
			g.ServeTickets(ctx)
			return
		}
		gs.reached.Add(1)
		ctx.SetBodyString(CallerOf(ctx).Key())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if w := g.Listening(ln.Addr()); w != "" {
		t.Fatalf("warning on loopback: %s", w)
	}
	srv := &fasthttp.Server{Handler: g.Wrap(mux), Logger: discardLogger{}}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	gs.host = ln.Addr().String()
	gs.url = "http://" + gs.host
	return gs
}

// discardLogger drops fasthttp's own messages (requests it could not read,
// which the Host table sends on purpose).
type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

type reply struct {
	status int
	h      http.Header
	body   string
}

// do sends one request; hdr may set "Host".
func (gs *guarded) do(t *testing.T, method, path, body string, hdr map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, gs.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// raw sends one request over TCP exactly as given, Host included (Go's
// client would clean up a malformed one), and reads the answer.
func (gs *guarded) raw(t *testing.T, method, path string, hdr map[string]string) reply {
	t.Helper()
	c, err := net.DialTimeout("tcp", gs.host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	b.WriteString(method + " " + path + " HTTP/1.1\r\nHost: " + hdr["Host"] + "\r\n")
	for k, v := range hdr {
		if k != "Host" {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	b.WriteString("Connection: close\r\n\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(body)}
}

func TestGuardHost(t *testing.T) {
	gs := startGuarded(t, Config{AllowedHosts: []string{"aiod.example.com", "*.lab.example"}})
	port := gs.host[strings.LastIndexByte(gs.host, ':'):]
	for _, tc := range []struct {
		host string
		want int
	}{
		{gs.host, 200},
		{"localhost" + port, 200},
		{"LOCALHOST." + port, 200},
		{"[::1]" + port, 200},
		{"127.0.0.2", 200},
		{"aiod.example.com", 200},
		{"AIOD.example.com.:443", 200},
		{"box.lab.example", 200},
		{"evil.example" + port, 403},
		{"evil.example", 403},
		{"localhost.evil.example" + port, 403},
		{"127.0.0.1.evil.example", 403},
		{"lab.example", 403},
		{"10.0.0.1" + port, 403},
		{"user@localhost" + port, 400},
		{"::1", 400},
		{"[::1", 400},
		{"localhost:0", 400},
	} {
		for _, upgrade := range []bool{false, true} {
			hdr := map[string]string{"Host": tc.host}
			if upgrade {
				hdr["Connection"], hdr["Upgrade"], hdr["Sec-WebSocket-Version"], hdr["Sec-WebSocket-Key"] = "Upgrade", "websocket", "13", "dGhlIHNhbXBsZSBub25jZQ=="
			}
			before := gs.reached.Load()
			r := gs.raw(t, "GET", "/v2/code/sessions", hdr)
			if r.status != tc.want {
				t.Errorf("Host %q (upgrade %v): %d %s, want %d", tc.host, upgrade, r.status, r.body, tc.want)
			}
			if tc.want != 200 && gs.reached.Load() != before {
				t.Errorf("Host %q reached the handler", tc.host)
			}
			if tc.want == 403 && !strings.Contains(r.body, "--allowed-hosts") {
				t.Errorf("Host %q: the refusal does not name the flag: %s", tc.host, r.body)
			}
		}
	}
	// /healthz is open to callers without credentials, not to foreign hosts.
	if r := gs.do(t, "GET", "/healthz", "", map[string]string{"Host": "evil.example"}); r.status != 403 {
		t.Errorf("/healthz with a foreign Host: %d", r.status)
	}
	if log := gs.log.String(); !strings.Contains(log, `reason="Host \"evil.example:`) || !strings.Contains(log, "remote=127.0.0.1:") || !strings.Contains(log, "path=/v2/code/sessions") {
		t.Errorf("the refusal log lacks reason, remote or path:\n%s", log)
	}

	star := startGuarded(t, Config{AllowedHosts: []string{"*"}})
	if r := star.do(t, "GET", "/", "", map[string]string{"Host": "evil.example"}); r.status != 200 {
		t.Errorf(`--allowed-hosts "*": %d %s`, r.status, r.body)
	}
}

// On a non-loopback address the machine's own names and addresses are
// allowed, and without credentials Listening warns.
func TestGuardListeningNonLoopback(t *testing.T) {
	g, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	w := g.Listening(&net.TCPAddr{IP: net.IPv4zero, Port: 18091})
	if !strings.Contains(w, "AIO_TOKEN") || !strings.Contains(w, "--jwt-public-key") || !strings.Contains(w, "0.0.0.0:18091") {
		t.Fatalf("warning: %q", w)
	}
	name, _ := os.Hostname()
	h, err := ParseHost(name)
	if err != nil || !g.HostAllowed(h) {
		t.Errorf("the machine's name %q is not allowed (%v)", name, err)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		hdr := hostFromIP(p.Addr()).String() // as a Host header writes it
		h, err := ParseHost(hdr)
		if err != nil || !g.HostAllowed(h) {
			t.Errorf("interface address %s is not allowed (%v)", hdr, err)
		}
	}
	if h, _ := ParseHost("evil.example"); g.HostAllowed(h) {
		t.Error("evil.example is allowed")
	}
	withToken, _ := New(Config{Token: "t"})
	if w := withToken.Listening(&net.TCPAddr{IP: net.IPv4zero, Port: 1}); w != "" {
		t.Errorf("warning with a token: %q", w)
	}
}

func TestGuardOrigin(t *testing.T) {
	gs := startGuarded(t, Config{AllowedOrigins: []string{"https://good.example"}})
	self := gs.url
	for _, tc := range []struct {
		method, origin, ctype string
		upgrade               bool
		want                  int
	}{
		{"POST", "", "application/json", false, 200},
		{"POST", self, "text/plain", false, 200},
		{"POST", "https://good.example", "application/json", false, 200},
		{"POST", "http://evil.example", "text/plain", false, 403},
		{"POST", "http://evil.example", "application/x-www-form-urlencoded", false, 403},
		{"POST", "http://evil.example", "multipart/form-data; boundary=x", false, 403}, // the body below is a valid multipart form
		{"POST", "null", "text/plain", false, 403},
		{"POST", "http://localhost" + gs.host[strings.LastIndexByte(gs.host, ':'):], "text/plain", false, 403}, // another host name is another origin
		{"POST", "http://127.0.0.1:1", "text/plain", false, 403},                                               // another port
		{"POST", "https://" + gs.host, "text/plain", false, 403},                                               // another scheme
		{"POST", "http://user@" + gs.host, "text/plain", false, 403},                                           // not an origin a browser sends
		{"PUT", "http://evil.example", "text/plain", false, 403},
		{"PATCH", "http://evil.example", "text/plain", false, 403},
		{"DELETE", "http://evil.example", "", false, 403},
		{"GET", "http://evil.example", "", false, 200}, // a read: CORS keeps the answer from the page
		{"GET", "http://evil.example", "", true, 403},  // a WebSocket handshake changes state
		{"GET", "null", "", true, 403},
		{"GET", self, "", true, 200},
		{"GET", "https://good.example", "", true, 200},
	} {
		hdr := map[string]string{}
		if tc.origin != "" {
			hdr["Origin"] = tc.origin
		}
		if tc.ctype != "" {
			hdr["Content-Type"] = tc.ctype
		}
		if tc.upgrade {
			hdr["Connection"], hdr["Upgrade"] = "Upgrade", "websocket"
		}
		before := gs.reached.Load()
		body := `{"code":"1"}`
		if strings.HasPrefix(tc.ctype, "multipart/") {
			body = "--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhello\r\n--x--\r\n"
		}
		r := gs.do(t, tc.method, "/v2/code/execute", body, hdr)
		if r.status != tc.want {
			t.Errorf("%s Origin %q %s upgrade %v: %d %s, want %d", tc.method, tc.origin, tc.ctype, tc.upgrade, r.status, r.body, tc.want)
		}
		reached := gs.reached.Load() != before
		if reached != (tc.want == 200) {
			t.Errorf("%s Origin %q: reached the handler: %v", tc.method, tc.origin, reached)
		}
		if tc.want == 403 && !strings.Contains(r.body, "--allowed-origins") {
			t.Errorf("%s Origin %q: the refusal does not name the flag: %s", tc.method, tc.origin, r.body)
		}
		acao := r.h.Get("Access-Control-Allow-Origin")
		if want := tc.origin == "https://good.example"; (acao != "") != want || (want && acao != tc.origin) {
			t.Errorf("%s Origin %q: Access-Control-Allow-Origin %q", tc.method, tc.origin, acao)
		}
	}

	any := startGuarded(t, Config{AllowedOrigins: []string{"*"}})
	for _, o := range []string{"http://evil.example", "null"} {
		if r := any.do(t, "POST", "/v2/code/execute", "x", map[string]string{"Origin": o}); r.status != 200 {
			t.Errorf(`--allowed-origins "*", Origin %q: %d`, o, r.status)
		}
	}
}

func TestGuardPreflight(t *testing.T) {
	gs := startGuarded(t, Config{AllowedOrigins: []string{"https://good.example"}, Token: "s3cret"})
	pre := func(origin string) reply {
		return gs.do(t, "OPTIONS", "/v2/code/execute", "", map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST",
			"Access-Control-Request-Headers":         "authorization, content-type",
			"Access-Control-Request-Private-Network": "true",
		})
	}
	r := pre("https://good.example")
	if r.status != 204 || r.h.Get("Access-Control-Allow-Origin") != "https://good.example" ||
		!strings.Contains(r.h.Get("Access-Control-Allow-Methods"), "POST") ||
		r.h.Get("Access-Control-Allow-Headers") != "authorization, content-type" ||
		r.h.Get("Access-Control-Allow-Private-Network") != "true" || !strings.Contains(strings.Join(r.h.Values("Vary"), ","), "Origin") {
		t.Errorf("preflight from an allowed origin: %d %v", r.status, r.h)
	}
	for _, o := range []string{"http://evil.example", "null", "https://good.example.evil"} {
		r := pre(o)
		if r.status != 403 || r.h.Get("Access-Control-Allow-Origin") != "" || r.h.Get("Access-Control-Allow-Private-Network") != "" {
			t.Errorf("preflight from %q: %d %v", o, r.status, r.h)
		}
	}
	if gs.reached.Load() != 0 {
		t.Errorf("preflights reached the handler")
	}
}

func TestGuardAuth(t *testing.T) {
	now := time.Now()
	clk := kerneltest.NewClock(time.Now())
	gs := startGuarded(t, Config{Token: "s3cret", JWTPublicKey: pemPublic(t, testKeys.rsa), TicketTTL: 2 * time.Second, Now: clk.Now})
	jwtOK := sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "agent-7", "exp": now.Add(time.Hour).Unix()})
	jwtOld := sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "agent-7", "exp": now.Add(-time.Hour).Unix()})
	bearer := func(v string) map[string]string { return map[string]string{"Authorization": "Bearer " + v} }
	for _, tc := range []struct {
		name, path string
		hdr        map[string]string
		want       int
		key        string
	}{
		{"no credentials", "/x", nil, 401, ""},
		{"token", "/x", bearer("s3cret"), 200, "token"},
		{"token scheme", "/x", map[string]string{"Authorization": "token s3cret"}, 200, "token"},
		{"lower-case bearer", "/x", map[string]string{"Authorization": "bearer s3cret"}, 200, "token"},
		{"?token=", "/x?token=s3cret", nil, 200, "token"},
		{"wrong token", "/x", bearer("nope"), 401, ""},
		{"JWT", "/x", bearer(jwtOK), 200, "jwt:agent-7"},
		{"JWT as ?token=", "/x?token=" + jwtOK, nil, 200, "jwt:agent-7"},
		{"expired JWT", "/x", bearer(jwtOld), 401, ""},
		{"Basic", "/x", map[string]string{"Authorization": "Basic czNjcmV0"}, 401, ""},
		{"/healthz is open", "/healthz", nil, 200, "anonymous"},
	} {
		r := gs.do(t, "GET", tc.path, "", tc.hdr)
		if r.status != tc.want || (tc.want == 200 && r.body != tc.key) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, r.status, r.body, tc.want, tc.key)
		}
		if tc.want == 401 && r.h.Get("WWW-Authenticate") != `Bearer realm="aiod"` {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, r.h.Get("WWW-Authenticate"))
		}
	}

	// A ticket, bought with the JWT, works once and carries the JWT's subject.
	ticket := func(hdr map[string]string) (string, int) {
		r := gs.do(t, "POST", "/tickets", "", hdr)
		var m struct {
			Ticket    string `json:"ticket"`
			ExpiresIn int    `json:"expires_in"`
		}
		if r.status == 200 {
			if err := json.Unmarshal([]byte(r.body), &m); err != nil || m.Ticket == "" || m.ExpiresIn != 2 || r.h.Get("Cache-Control") != "no-store" {
				t.Fatalf("POST /tickets: %s (%v) %v", r.body, err, r.h)
			}
		}
		return m.Ticket, r.status
	}
	tk, st := ticket(bearer(jwtOK))
	if st != 200 {
		t.Fatalf("POST /tickets with a JWT: %d", st)
	}
	if r := gs.do(t, "GET", "/x?ticket="+tk, "", nil); r.status != 200 || r.body != "jwt:agent-7" {
		t.Errorf("first use of a ticket: %d %q", r.status, r.body)
	}
	r := gs.do(t, "GET", "/x?ticket="+tk, "", nil)
	if r.status != 401 || !strings.Contains(r.body, "already used") {
		t.Errorf("second use of a ticket: %d %s", r.status, r.body)
	}
	// A ticket does not buy a ticket; no credentials buy nothing.
	tk2, _ := ticket(bearer("s3cret"))
	if _, st := ticket(map[string]string{}); st != 401 {
		t.Errorf("POST /tickets without credentials: %d", st)
	}
	if r := gs.do(t, "POST", "/tickets?ticket="+tk2, "", nil); r.status != 401 {
		t.Errorf("POST /tickets with a ticket: %d %s", r.status, r.body)
	}
	// Past its TTL a ticket fails.
	tk3, _ := ticket(bearer("s3cret"))
	clk.Add(2100 * time.Millisecond)
	if r := gs.do(t, "GET", "/x?ticket="+tk3, "", nil); r.status != 401 {
		t.Errorf("a ticket after its TTL: %d %s", r.status, r.body)
	}

	// Refusals are logged without the credential.
	log := gs.log.String()
	for _, secret := range []string{"s3cret", "nope", jwtOld, tk, tk3} {
		if strings.Contains(log, secret) {
			t.Errorf("the log carries a credential %q:\n%s", secret, log)
		}
	}
	if !strings.Contains(log, "status=401") || !strings.Contains(log, "expired") {
		t.Errorf("the log lacks the refusals:\n%s", log)
	}
}

// Without credentials configured, requests pass as "anonymous", and
// POST /tickets still answers (the page asks for one either way).
func TestGuardNoAuth(t *testing.T) {
	gs := startGuarded(t, Config{})
	if r := gs.do(t, "POST", "/x", "", nil); r.status != 200 || r.body != "anonymous" {
		t.Errorf("POST without credentials: %d %q", r.status, r.body)
	}
	if r := gs.do(t, "POST", "/tickets", "", map[string]string{"Origin": gs.url}); r.status != 200 || !strings.Contains(r.body, `"expires_in":30`) {
		t.Errorf("POST /tickets: %d %s", r.status, r.body)
	}
	if r := gs.do(t, "POST", "/tickets", "", map[string]string{"Origin": "http://evil.example"}); r.status != 403 {
		t.Errorf("cross-origin POST /tickets: %d %s", r.status, r.body)
	}
}

func TestGuardConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		flag string
	}{
		{Config{AllowedHosts: []string{"x:80"}}, "--allowed-hosts"},
		{Config{AllowedOrigins: []string{"https://x/path"}}, "--allowed-origins"},
		{Config{JWTPublicKey: "not a key"}, "--jwt-public-key"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.flag)
		}
	}
}

// TestGuardFetchMetadata: a browser's request for a page of another site
// (or of the same site on another port) that is not a navigation is
// refused before the handler, unless its Origin is allowed; same-origin
// requests, navigations and requests without Fetch Metadata pass.
func TestGuardFetchMetadata(t *testing.T) {
	gs := startGuarded(t, Config{AllowedOrigins: []string{"https://good.example"}})
	for _, tc := range []struct {
		method, site, mode, origin string
		want                       int
	}{
		{"GET", "", "", "", 200}, // curl, SDKs
		{"GET", "same-origin", "no-cors", "", 200},
		{"GET", "same-origin", "cors", gs.url, 200},
		{"GET", "none", "navigate", "", 200}, // typed in the address bar
		{"GET", "cross-site", "navigate", "", 200},
		{"GET", "same-site", "navigate", "", 200},
		{"GET", "cross-site", "no-cors", "", 403}, // <script src>, <img src>
		{"GET", "same-site", "no-cors", "", 403},  // the same from another port on localhost
		{"GET", "cross-site", "cors", "http://evil.example", 403},
		{"GET", "cross-site", "cors", "https://good.example", 200}, // an allowed front end's fetch
		{"GET", "cross-site", "no-cors", "https://good.example", 200},
		{"GET", "same-site", "websocket", "http://127.0.0.1:1", 403},
		{"POST", "cross-site", "no-cors", "http://evil.example", 403},
		{"POST", "cross-site", "navigate", "http://evil.example", 403}, // a form: the Origin rule refuses it
	} {
		hdr := map[string]string{}
		if tc.site != "" {
			hdr["Sec-Fetch-Site"] = tc.site
		}
		if tc.mode != "" {
			hdr["Sec-Fetch-Mode"] = tc.mode
		}
		if tc.origin != "" {
			hdr["Origin"] = tc.origin
		}
		before := gs.reached.Load()
		r := gs.do(t, tc.method, "/v2/fs/download?path=/x.js", "", hdr)
		if r.status != tc.want || (gs.reached.Load() != before) != (tc.want == 200) {
			t.Errorf("%s site %q mode %q origin %q: %d %s, want %d", tc.method, tc.site, tc.mode, tc.origin, r.status, r.body, tc.want)
		}
		if tc.want == 403 && !strings.Contains(r.body, "--allowed-origins") {
			t.Errorf("site %q mode %q: the refusal does not name the flag: %s", tc.site, tc.mode, r.body)
		}
	}
}

// TestGuardSecureHeaders: every answer through the guard, refusals
// included, carries nosniff and a same-origin resource policy.
func TestGuardSecureHeaders(t *testing.T) {
	gs := startGuarded(t, Config{Token: "s3cret", AllowedOrigins: []string{"https://good.example"}})
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
		want               int
	}{
		{"served", "GET", "/x", map[string]string{"Authorization": "Bearer s3cret"}, 200},
		{"open path", "GET", "/healthz", nil, 200},
		{"401", "GET", "/x", nil, 401},
		{"403 Host", "GET", "/x", map[string]string{"Host": "evil.example"}, 403},
		{"403 Origin", "POST", "/x", map[string]string{"Origin": "http://evil.example"}, 403},
		{"403 Fetch Metadata", "GET", "/x", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, 403},
		{"preflight", "OPTIONS", "/x", map[string]string{"Origin": "https://good.example", "Access-Control-Request-Method": "POST"}, 204},
	} {
		r := gs.do(t, tc.method, tc.path, "", tc.hdr)
		if r.status != tc.want || r.h.Get("X-Content-Type-Options") != "nosniff" || r.h.Get("Cross-Origin-Resource-Policy") != "same-origin" {
			t.Errorf("%s: %d, X-Content-Type-Options %q, Cross-Origin-Resource-Policy %q; want %d, nosniff, same-origin",
				tc.name, r.status, r.h.Get("X-Content-Type-Options"), r.h.Get("Cross-Origin-Resource-Policy"), tc.want)
		}
	}
}

// TestGuardOpenPathsAreRaw: an open path is open only as the raw path the
// router dispatches on; a path that decodes or normalises to one is not.
func TestGuardOpenPathsAreRaw(t *testing.T) {
	gs := startGuarded(t, Config{Token: "s3cret"})
	if r := gs.raw(t, "GET", "/healthz", map[string]string{"Host": gs.host}); r.status != 200 {
		t.Fatalf("/healthz: %d %s", r.status, r.body)
	}
	for _, p := range []string{
		"/api/kernels/X%2F..%2F..%2F..%2Fhealthz", "/api/kernels/X/../../healthz", "/x/%2e%2e/healthz",
		"/./healthz", "//healthz", "/heal%74hz", "/healthz/", "/HEALTHZ", "/healthz%00",
	} {
		before := gs.reached.Load()
		r := gs.raw(t, "GET", p, map[string]string{"Host": gs.host})
		if r.status != 401 || gs.reached.Load() != before {
			t.Errorf("GET %s without credentials: %d %s, want 401 before the handler", p, r.status, r.body)
		}
	}
}

// TestGuardHeaderAuthorized is the check made on a request's header before
// its body is read: it looks at a ticket without using it up.
func TestGuardHeaderAuthorized(t *testing.T) {
	now := time.Now()
	gs := startGuarded(t, Config{Token: "s3cret", JWTPublicKey: pemPublic(t, testKeys.rsa)})
	jwtOK := sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "a", "exp": now.Add(time.Hour).Unix()})
	r := gs.do(t, "POST", "/tickets", "", map[string]string{"Authorization": "Bearer s3cret"})
	var tk struct{ Ticket string }
	if err := json.Unmarshal([]byte(r.body), &tk); err != nil || tk.Ticket == "" {
		t.Fatalf("POST /tickets: %d %s", r.status, r.body)
	}
	header := func(method, uri, auth string) *fasthttp.RequestHeader {
		var h fasthttp.RequestHeader
		h.SetMethod(method)
		h.SetRequestURI(uri)
		if auth != "" {
			h.Set("Authorization", auth)
		}
		return &h
	}
	for _, tc := range []struct {
		name string
		h    *fasthttp.RequestHeader
		want bool
	}{
		{"none", header("POST", "/v2/fs/upload", ""), false},
		{"token", header("POST", "/v2/fs/upload", "Bearer s3cret"), true},
		{"wrong token", header("POST", "/v2/fs/upload", "Bearer nope"), false},
		{"?token=", header("POST", "/v2/fs/upload?a=1&token=s3cret", ""), true},
		{"JWT", header("POST", "/v2/fs/upload", "Bearer "+jwtOK), true},
		{"ticket", header("POST", "/v2/fs/upload?ticket="+tk.Ticket, ""), true},
		{"ticket again (not used up)", header("POST", "/v2/fs/upload?ticket="+tk.Ticket, ""), true},
		{"ticket for a ticket", header("POST", "/tickets?ticket="+tk.Ticket, ""), false},
		{"unknown ticket", header("POST", "/v2/fs/upload?ticket=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", ""), false},
	} {
		if got := gs.g.HeaderAuthorized(tc.h); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if r := gs.do(t, "GET", "/x?ticket="+tk.Ticket, "", nil); r.status != 200 {
		t.Errorf("the ticket after the header checks: %d %s, want it still unused", r.status, r.body)
	}
	open, _ := New(Config{})
	if !open.HeaderAuthorized(header("POST", "/x", "")) {
		t.Error("without configured credentials every header passes")
	}
}
