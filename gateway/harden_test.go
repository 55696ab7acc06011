package gateway

// Tests of the transport hardening of issue 23 against a live gateway:
// one path decision for the guard and the router, no large body before
// authentication, fixed error texts, nosniff and CORP on every answer, and
// the per-client connection cap.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// rawReply is an answer read off a raw connection.
type rawReply struct {
	status int
	h      http.Header
	body   string
}

// rawHTTP sends req (the whole request, as bytes) on a new connection to
// ts and reads one answer. A request that leaves its body unsent reads the
// answer the server sends before it. err is set when the server closed the
// connection without an answer.
func rawHTTP(t testing.TB, ts *testServer, req string) (rawReply, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(ts.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A bound for a stuck server, not a speed: a 20 MiB upload under
	// -race beside .ci/run and another go test took over 20 s.
	_ = c.SetDeadline(time.Now().Add(90 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return rawReply{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return rawReply{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawReply{resp.StatusCode, resp.Header, string(b)}, nil
}

// TestEncodedTraversalNeedsCredentials: a path whose decoded form is an
// open path (/healthz, /docs, /openapi.json) is judged as the raw path the
// router dispatches on, so it needs credentials on every route; with them
// it reaches that route, not the open one.
func TestEncodedTraversalNeedsCredentials(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Token: "s3cret"})
	host := strings.TrimPrefix(ts.URL, "http://")
	get := func(method, path, auth string) rawReply {
		t.Helper()
		req := method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
		if auth != "" {
			req += "Authorization: Bearer " + auth + "\r\n"
		}
		r, err := rawHTTP(t, ts, req+"\r\n")
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return r
	}
	if r := get("GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("/healthz: %d %s", r.status, r.body)
	}
	for _, tc := range []struct{ method, path string }{
		{"GET", "/api/kernels/X%2F..%2F..%2F..%2Fhealthz"},
		{"GET", "/api/kernels/X%2f..%2f..%2f..%2fhealthz"},
		{"DELETE", "/api/kernels/X%2F..%2F..%2F..%2Fhealthz"},
		{"POST", "/api/kernels/X%2F..%2F..%2F..%2Fhealthz/interrupt"},
		{"GET", "/api/kernelspecs/..%2F..%2Fhealthz"},
		{"GET", "/api/kernels/X%2F..%2F..%2F..%2Fdocs"},
		{"GET", "/api/kernels/X%2F..%2F..%2F..%2Fopenapi.json"},
		{"DELETE", "/v2/code/sessions/X%2F..%2F..%2F..%2Fhealthz"},
		{"GET", "/v2/code/executions/%2E%2E%2F%2E%2E%2F%2E%2E%2Fhealthz"},
		{"DELETE", "/v1/nodejs/sessions/X%2F..%2F..%2F..%2Fhealthz"},
		{"GET", "/v1/jupyter/sessions/X%2F..%2F..%2F..%2Fhealthz"},
		{"GET", "/static/..%2Fhealthz"},
		{"GET", "/v2/code/../../healthz/../v2/code/info"},
		{"GET", "/./healthz"},
		{"GET", "/heal%74hz"},
	} {
		r := get(tc.method, tc.path, "")
		if r.status != 401 || r.h.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s without credentials: %d %s, want 401", tc.method, tc.path, r.status, r.body)
		}
		if strings.Contains(r.body, `"status":"ok"`) {
			t.Errorf("%s %s: answered by /healthz: %s", tc.method, tc.path, r.body)
		}
	}
	// With credentials the kernels route answers for the odd id: it is a
	// kernel id there, never /healthz.
	if r := get("GET", "/api/kernels/X%2F..%2F..%2F..%2Fhealthz", "s3cret"); r.status != 404 || strings.Contains(r.body, `"status":"ok"`) {
		t.Errorf("with credentials: %d %s, want the kernels route's 404", r.status, r.body)
	}
}

// TestEveryAnswerHasSecureHeaders walks every route the router knows (GET
// on each, so nothing starts), the router's 404 and 405, the guard's
// refusals and fasthttp's own errors: each answer carries nosniff and a
// same-origin resource policy.
func TestEveryAnswerHasSecureHeaders(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Token: "s3cret", MaxBody: 1 << 20})
	host := strings.TrimPrefix(ts.URL, "http://")
	check := func(what string, r rawReply, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		if r.h.Get("X-Content-Type-Options") != "nosniff" || r.h.Get("Cross-Origin-Resource-Policy") != "same-origin" {
			t.Errorf("%s: %d, X-Content-Type-Options %q, Cross-Origin-Resource-Policy %q", what, r.status,
				r.h.Get("X-Content-Type-Options"), r.h.Get("Cross-Origin-Resource-Policy"))
		}
	}
	paths := map[string]bool{}
	for _, ps := range ts.routes().List() {
		for _, p := range ps {
			p = strings.NewReplacer("{id}", "x", "{name}", "x", "{session_id}", "x", "{filepath:*}", "x.js").Replace(p)
			paths[p] = true
		}
	}
	if len(paths) < 40 {
		t.Fatalf("only %d routes listed", len(paths))
	}
	for p := range paths {
		for _, auth := range []string{"", "Authorization: Bearer s3cret\r\n"} {
			r, err := rawHTTP(t, ts, "GET "+p+" HTTP/1.1\r\nHost: "+host+"\r\n"+auth+"Connection: close\r\n\r\n")
			check(fmt.Sprintf("GET %s (credentials %v)", p, auth != ""), r, err)
		}
	}
	for what, req := range map[string]string{
		"404":         "GET /no/such/route HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer s3cret\r\nConnection: close\r\n\r\n",
		"405":         "PUT /healthz HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer s3cret\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
		"403 Host":    "GET /healthz HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
		"403 Fetch":   "GET /v2/fs/download?path=/etc/hostname HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer s3cret\r\nSec-Fetch-Site: same-site\r\nSec-Fetch-Mode: no-cors\r\nConnection: close\r\n\r\n",
		"413":         "POST /v2/fs/write HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer s3cret\r\nContent-Length: 2000000\r\n\r\n{",
		"401 body":    "POST /v2/fs/write HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 2000000\r\n\r\n{",
		"431":         "GET /healthz HTTP/1.1\r\nHost: " + host + "\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\n\r\n",
		"400":         "POST /v2/fs/write HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: x1\r\n\r\n",
		"400 chunked": "POST /v2/fs/write HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer s3cret\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"413 Expect":  "POST /v2/fs/write HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer s3cret\r\nExpect: 100-continue\r\nContent-Length: 2000000\r\n\r\n",
		"401 Expect":  "POST /v2/fs/write HTTP/1.1\r\nHost: " + host + "\r\nExpect: 100-continue\r\nContent-Length: 2000000\r\n\r\n",
		"101 WebSocket": "GET /v2/code/ws HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer s3cret\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
		"WebSocket handshake refused": "GET /v2/code/ws HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer s3cret\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
			"Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
		"400 no Host":  "GET /healthz HTTP/1.1\r\n\r\n",
		"400 bad line": "GET\r\n\r\n",
	} {
		r, err := rawHTTP(t, ts, req)
		check(what, r, err)
	}
}

// TestTransportErrorsNeverEchoTheRequest: requests fasthttp cannot read are
// answered with fixed texts, never the request's bytes: a token in the
// Authorization header or the query stays out of every answer.
func TestTransportErrorsNeverEchoTheRequest(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-do-not-echo"
	ts := startServer(t, Config{Token: secret, MaxBody: 1 << 20})
	host := strings.TrimPrefix(ts.URL, "http://")
	big := "X-Padding: " + strings.Repeat("p", 5000) + "\r\n"
	for _, tc := range []struct {
		name, req string
		status    int
		says      string
	}{
		{"oversized header, bearer token", "GET /v2/code/info HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + secret + "\r\n" + big + "\r\n",
			431, "request headers are larger than 4096 bytes"},
		{"oversized header, ?token=", "GET /v2/code/info?token=" + secret + " HTTP/1.1\r\nHost: " + host + "\r\n" + big + "\r\n",
			431, "request headers are larger than 4096 bytes"},
		{"oversized URL with ?token=", "GET /v2/code/info?token=" + secret + "&x=" + strings.Repeat("u", 5000) + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n",
			431, "request headers are larger than 4096 bytes"},
		{"bad Content-Length", "POST /v2/fs/write?token=" + secret + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + secret + "\r\nContent-Length: 12x\r\n\r\n",
			400, "cannot read request"},
		{"two Content-Lengths", "POST /v2/fs/write?token=" + secret + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
			400, "cannot read request"},
		{"unsupported Transfer-Encoding", "POST /v2/fs/write?token=" + secret + " HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: gzip\r\n\r\n",
			400, "cannot read request"},
		{"broken chunk", "POST /v2/fs/write?token=" + secret + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + secret + "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcdefgh\r\n0\r\n\r\n",
			400, "chunked body is malformed"},
		{"bad request line", "GET /v2/code/info?token=" + secret + " HTTP/1.1 extra\r\nHost: " + host + "\r\n\r\n",
			400, "cannot read request"},
		{"body over --max-body", "POST /v2/fs/write?token=" + secret + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 2000000\r\n\r\n",
			413, "--max-body"},
	} {
		r, err := rawHTTP(t, ts, tc.req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if r.status != tc.status || !strings.Contains(r.body, tc.says) {
			t.Errorf("%s: %d %s, want %d saying %q", tc.name, r.status, r.body, tc.status, tc.says)
		}
		if strings.Contains(r.body, secret) || strings.Contains(fmt.Sprint(r.h), secret) || strings.Contains(r.body, "ppppp") {
			t.Errorf("%s: the answer quotes the request: %s", tc.name, r.body)
		}
	}
}

// TestNoLargeBodyBeforeAuthentication: with a token required, a request
// whose header carries no valid credentials may send a few KiB of body; a
// larger one (declared, chunked, or behind Expect: 100-continue) is
// answered 401 with WWW-Authenticate at once, not read. With credentials
// (the token, ?token=, a ticket) large bodies are read as before, up to
// --max-body.
func TestNoLargeBodyBeforeAuthentication(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := startServer(t, Config{Token: "s3cret", MaxBody: 32 << 20})
	host := strings.TrimPrefix(ts.URL, "http://")
	head := func(auth, path string) string {
		h := "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\n"
		if auth != "" {
			h += "Authorization: Bearer " + auth + "\r\n"
		}
		return h
	}
	for _, tc := range []struct{ name, req string }{
		{"declared 64 MiB, a few bytes sent", head("", "/v2/fs/write") + "Content-Length: 67108864\r\n\r\n{\"path\":"},
		{"declared 64 MiB, wrong token", head("nope", "/v2/fs/write") + "Content-Length: 67108864\r\n\r\n{"},
		{"declared 9 KiB", head("", "/v2/fs/write") + "Content-Length: 9216\r\n\r\n" + strings.Repeat(" ", 9216)},
		{"one 64 MiB chunk", head("", "/v2/fs/write") + "Transfer-Encoding: chunked\r\n\r\n4000000\r\n{\"path\""},
		{"small chunks past 8 KiB", head("", "/v2/fs/write") + "Transfer-Encoding: chunked\r\n\r\n" + strings.Repeat("400\r\n"+strings.Repeat(" ", 1024)+"\r\n", 9) + "0\r\n\r\n"},
		{"Expect: 100-continue", head("", "/v2/fs/write") + "Expect: 100-continue\r\nContent-Length: 1048576\r\n\r\n"},
		{"a ticket for a ticket", head("", "/tickets?ticket=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA") + "Content-Length: 67108864\r\n\r\n"},
	} {
		start := time.Now()
		r, err := rawHTTP(t, ts, tc.req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if r.status != 401 || r.h.Get("WWW-Authenticate") != `Bearer realm="aiod"` || !strings.Contains(r.body, "8192 bytes") {
			t.Errorf("%s: %d %q %s, want 401 with WWW-Authenticate naming the 8192-byte limit", tc.name, r.status, r.h.Get("WWW-Authenticate"), r.body)
		}
		// A server waiting for the body would answer only at its read
		// timeout (60 s); half of that is no loaded machine's delay.
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("%s: answered after %s, want at once", tc.name, d)
		}
	}
	// A small unauthenticated body is read and refused by the guard as usual.
	if r, err := rawHTTP(t, ts, head("", "/v2/fs/write")+"Content-Length: 2\r\n\r\n{}"); err != nil || r.status != 401 || !strings.Contains(r.body, "no credentials") {
		t.Errorf("a small body without credentials: %d %s (%v)", r.status, r.body, err)
	}

	// Authenticated large uploads still work: the token, ?token=, a ticket,
	// and a chunked body; past --max-body it is 413.
	content := strings.Repeat("a", 20<<20)
	body := func(name string) string { return `{"path":"` + dir + "/" + name + `","content":"` + content + `"}` }
	// The ticket is made right before its upload: it lives 30 s, and
	// the two uploads before it took longer than that under -race beside
	// another suite.
	ticket := func() string {
		status, _, text := ts.secReq(t, "POST", "/tickets", "", nil, map[string]string{"Authorization": "Bearer s3cret"})
		var tk struct{ Ticket string }
		if status != 200 || json.Unmarshal([]byte(text), &tk) != nil {
			t.Fatalf("POST /tickets: %d %s", status, text)
		}
		return tk.Ticket
	}
	for _, tc := range []struct{ name, path, auth string }{
		{"token", "/v2/fs/write", "s3cret"},
		{"?token=", "/v2/fs/write?token=s3cret", ""},
		{"ticket", "/v2/fs/write?ticket=", ""},
	} {
		if tc.name == "ticket" {
			tc.path += ticket()
		}
		b := body(tc.name)
		r, err := rawHTTP(t, ts, head(tc.auth, tc.path)+fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n", len(b))+b)
		if err != nil || r.status != 200 || !strings.Contains(r.body, fmt.Sprintf(`"size":%d`, len(content))) {
			t.Errorf("a 20 MiB upload with a %s: %d %.300s (%v)", tc.name, r.status, r.body, err)
		}
	}
	b := body("chunked")
	var chunked strings.Builder
	for i := 0; i < len(b); i += 1 << 20 {
		part := b[i:min(i+1<<20, len(b))]
		fmt.Fprintf(&chunked, "%x\r\n%s\r\n", len(part), part)
	}
	chunked.WriteString("0\r\n\r\n")
	if r, err := rawHTTP(t, ts, head("s3cret", "/v2/fs/write")+"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"+chunked.String()); err != nil || r.status != 200 {
		t.Errorf("a chunked 20 MiB upload with the token: %d %.300s (%v)", r.status, r.body, err)
	}
	if r, err := rawHTTP(t, ts, head("s3cret", "/v2/fs/write")+"Content-Length: 40000000\r\n\r\n{"); err != nil || r.status != 413 {
		t.Errorf("over --max-body with the token: %d %s (%v)", r.status, r.body, err)
	}
}

// TestMaxConnsPerIP: past the cap a new connection from the same address
// is answered 429 and closed; once one closes, a new one is served.
func TestMaxConnsPerIP(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{MaxConnsPerIP: 4})
	addr := strings.TrimPrefix(ts.URL, "http://")
	_, info := ts.call(t, "GET", "/v2/code/info", nil)
	lim, _ := info["data"].(map[string]any)["limits"].(map[string]any)
	for k, want := range map[string]float64{"max_conns_per_ip": 4, "unauthenticated_body_bytes": UnauthBodyLimit,
		"max_header_bytes": 4096, "max_tickets_per_caller": 1000, "max_tickets": 10000} {
		if lim[k] != want {
			t.Errorf("/v2/code/info limits.%s: %v, want %v", k, lim[k], want)
		}
	}
	ts.client.CloseIdleConnections() // the four below are the only ones
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// The server counts a connection when it accepts it, and forgets one
	// the client closed once it has read its end: the client's idle
	// connections, just closed, may still count for a moment (a loaded
	// machine), so a 429 among the four is tried again, until a deadline.
	// A request on each proves it is counted.
	deadline := time.Now().Add(10 * time.Second)
	for len(held) < 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case err == nil && resp.StatusCode == 200:
			resp.Body.Close()
			held = append(held, c)
		case err == nil && resp.StatusCode == 429 && time.Now().Before(deadline):
			resp.Body.Close()
			c.Close()
			time.Sleep(50 * time.Millisecond)
		default:
			c.Close()
			t.Fatalf("one of the four: %v %v", resp, err)
		}
	}
	r, err := rawHTTP(t, ts, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	if err != nil || r.status != 429 {
		t.Errorf("a fifth connection: %d %q (%v), want 429", r.status, r.body, err)
	}
	held[0].Close()
	held = held[1:]
	deadline = time.Now().Add(10 * time.Second)
	for {
		r, err := rawHTTP(t, ts, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n")
		if err == nil && r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one closed: %d (%v)", r.status, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
