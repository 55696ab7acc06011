package gateway

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"
	"github.com/golang-jwt/jwt/v5"

	"github.com/aiod/aiod/stream"
)

// TestSessionCapsPerCaller runs JavaScript sessions (real Node REPLs)
// under --max-sessions 3 and --max-sessions-per-key 1 with JWT callers:
// each caller gets one session, a second is refused with 429, Retry-After
// and data.error_kind "admission" over REST and as a WebSocket error, and
// the global cap holds across callers.
func TestSessionCapsPerCaller(t *testing.T) {
	t.Parallel()
	key := testRSAKey()
	ts := startServer(t, Config{
		Token: "s3cret", JWTPublicKey: pemOf(t, &key.PublicKey),
		Admission: stream.Admission{MaxSessions: 3, MaxSessionsPerKey: 1},
	})
	now := time.Now()
	jwtOf := func(sub string) string {
		return signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": sub, "exp": now.Add(time.Hour).Unix()})
	}
	alice, bob, carol := jwtOf("alice"), jwtOf("bob"), jwtOf("carol")
	run := func(tok, sid, code string) (int, http.Header, string) {
		body := `{"language":"javascript","code":"` + code + `","session_id":"` + sid + `"}`
		req, _ := http.NewRequest("POST", ts.URL+"/v2/code/execute", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAllClose(t, resp)
		req.Body = io.NopCloser(strings.NewReader(body))
		checkAnswer(t, req, resp, b) // refusals too conform to openapi.json
		return resp.StatusCode, resp.Header, string(b)
	}
	if st, _, body := run(alice, "a1", "console.log(1)"); st != 200 || !strings.Contains(body, `"stdout":"1\n"`) {
		t.Fatalf("alice's first session: %d %s", st, body)
	}
	st, h, body := run(alice, "a2", "console.log(2)")
	if st != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, `"error_kind":"admission"`) ||
		!strings.Contains(body, "this caller (jwt:alice) has 1 live sessions") || !strings.Contains(body, "--max-sessions-per-key 1") {
		t.Fatalf("alice's second session: %d retry %q %s", st, h.Get("Retry-After"), body)
	}
	if st, _, body := run(alice, "a1", "console.log(3)"); st != 200 {
		t.Fatalf("alice's own session at her cap: %d %s", st, body)
	}
	if st, _, body := run(bob, "b1", "console.log(4)"); st != 200 {
		t.Fatalf("bob is not alice: %d %s", st, body)
	}

	// Over the WebSocket: an error message naming the limit.
	c := dialWSAuth(t, ts, alice)
	sendJSON(t, c, map[string]any{"type": "execute", "id": "w1", "language": "javascript", "code": "1", "session_id": "a3"})
	var got wsMsg
	for got = readJSON(t, c, 30*time.Second); got.typ() != "error"; got = readJSON(t, c, 30*time.Second) {
		if got.typ() == "result" {
			t.Fatalf("a session over the cap ran: %v", got.m)
		}
	}
	if got.m["status"] != float64(429) || got.m["error_kind"] != "admission" || got.m["retry_after"] == nil ||
		!strings.Contains(got.m["message"].(string), "--max-sessions-per-key") {
		t.Fatalf("WebSocket refusal: %v", got.m)
	}

	if st, _, body := run("s3cret", "t1", "console.log(5)"); st != 200 {
		t.Fatalf("the token's session: %d %s", st, body)
	}
	st, h, body = run(carol, "c1", "console.log(6)")
	if st != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, "3 sessions are live") || !strings.Contains(body, "--max-sessions 3") {
		t.Fatalf("over the global cap: %d %s", st, body)
	}
	// A delete frees the slot at once.
	if st, _, body := ts.secReq(t, "DELETE", "/v2/code/sessions/b1", "", nil, map[string]string{"Authorization": "Bearer " + bob}); st != 200 {
		t.Fatalf("delete b1: %d %s", st, body)
	}
	if st, _, body := run(carol, "c1", "console.log(7)"); st != 200 {
		t.Fatalf("after a delete: %d %s", st, body)
	}
	st, _, body = run(carol, "c1", "throw new Error('boom')")
	if st != 200 || !strings.Contains(body, `"error_kind":"exception"`) {
		t.Errorf("an exception's kind: %d %s", st, body)
	}
}

// TestEveryRuntimeStartIsAdmitted walks every route that can start a
// runtime against a gateway whose one session slot (--max-sessions 1) is
// taken, and checks that each is refused the way its protocol says (429
// with Retry-After and error_kind "admission"; the Jupyter API's 403
// "Resource Limit"; a WebSocket error message; an MCP tool error), and
// that nothing started. Then the one-shot node process of
// /v1/nodejs/execute with stdin is seen to count while it runs.
func TestEveryRuntimeStartIsAdmitted(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Admission: stream.Admission{MaxSessions: 1}})
	if st, _, data := ts.exec(t, map[string]any{"language": "javascript", "code": "1", "session_id": "holder"}); st != 200 || data["status"] != "ok" {
		t.Fatalf("the session that takes the slot: %d %v", st, data)
	}
	refused := func(what string, st int, h http.Header, body string) {
		t.Helper()
		if st != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, "--max-sessions 1") || !strings.Contains(body, `"error_kind":"admission"`) {
			t.Errorf("%s: %d Retry-After %q %.300s, want 429 naming --max-sessions 1", what, st, h.Get("Retry-After"), body)
		}
	}
	for _, tc := range []struct {
		name, path string
		body       map[string]any
	}{
		{"v2 execute, one-shot", "/v2/code/execute", map[string]any{"language": "javascript", "code": "1"}},
		{"v2 execute, python one-shot", "/v2/code/execute", map[string]any{"language": "python", "code": "1"}},
		{"v2 execute, new session", "/v2/code/execute", map[string]any{"language": "javascript", "code": "1", "session_id": "s2"}},
		{"v2 complete, new session", "/v2/code/complete", map[string]any{"language": "javascript", "code": "Mat", "session_id": "s3"}},
		{"v2 inspect, new session", "/v2/code/inspect", map[string]any{"language": "python", "code": "len", "session_id": "s4"}},
		{"v1 code", "/v1/code/execute", map[string]any{"language": "javascript", "code": "1"}},
		{"v1 jupyter", "/v1/jupyter/execute", map[string]any{"code": "1"}},
		{"v1 jupyter session", "/v1/jupyter/sessions/create", map[string]any{"session_id": "j1"}},
		{"v1 nodejs", "/v1/nodejs/execute", map[string]any{"code": "1"}},
		{"v1 nodejs stateful", "/v1/nodejs/execute", map[string]any{"code": "1", "stateful": true}},
		{"v1 nodejs with stdin", "/v1/nodejs/execute", map[string]any{"code": "process.stdin.pipe(process.stdout)", "stdin": "x"}},
		{"v1 nodejs session", "/v1/nodejs/sessions", map[string]any{"session_id": "n1"}},
	} {
		b, _ := json.Marshal(tc.body)
		st, h, body := ts.secReq(t, "POST", tc.path, "application/json", b, nil)
		refused(tc.name, st, h, body)
	}

	st, h, body := ts.secReq(t, "POST", "/api/kernels", "application/json", []byte(`{}`), nil)
	if st != 403 || h.Get("Retry-After") == "" || !strings.Contains(body, `"reason":"Resource Limit"`) || !strings.Contains(body, "--max-sessions 1") {
		t.Errorf("POST /api/kernels: %d Retry-After %q %s, want 403 Resource Limit", st, h.Get("Retry-After"), body)
	}

	c := dialWS(t, ts, nil)
	for i, sid := range []string{"w1", ""} {
		m := map[string]any{"type": "execute", "id": fmt.Sprint(i), "language": "javascript", "code": "1"}
		if sid != "" {
			m["session_id"] = sid
		}
		sendJSON(t, c, m)
		var got wsMsg
		for got = readJSON(t, c, 30*time.Second); got.typ() != "error"; got = readJSON(t, c, 30*time.Second) {
			if got.typ() == "result" {
				t.Fatalf("WebSocket execute %q over the cap ran: %v", sid, got.m)
			}
		}
		if got.m["status"] != float64(429) || got.m["error_kind"] != "admission" || !strings.Contains(fmt.Sprint(got.m["message"]), "--max-sessions 1") {
			t.Errorf("WebSocket execute %q: %v", sid, got.m)
		}
	}

	cs := mcpClient(t, ts, "", nil)
	for _, args := range []map[string]any{{"language": "javascript", "code": "1"}, {"language": "javascript", "code": "1", "session_id": "m1"}} {
		res := callTool(t, cs, "execute_code", args, nil)
		if !res.IsError || !strings.Contains(texts(res), "--max-sessions 1") {
			t.Errorf("MCP execute_code %v: isError %v %q", args, res.IsError, texts(res))
		}
	}

	if n := len(ts.Registry().ListAll()); n != 1 {
		t.Errorf("%d sessions after the refusals, want only the holder", n)
	}
	if got := ts.Registry().AdmissionStats().Live; got != 1 {
		t.Errorf("live %d after the refusals, want 1", got)
	}

	// The stdin path's own node process counts while it runs: with the
	// slot free, one such call takes it, and a one-shot is refused until
	// it has answered.
	if st, _, body := ts.secReq(t, "DELETE", "/v2/code/sessions/holder", "", nil, nil); st != 200 {
		t.Fatalf("delete holder: %d %s", st, body)
	}
	type answer struct {
		st   int
		body string
	}
	slow := make(chan answer, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{"code": "let n = 0; process.stdin.on('data', (d) => { n += d.length; }); setTimeout(() => console.log('read', n), 3000)", "stdin": "abc"})
		req, _ := http.NewRequest("POST", ts.URL+"/v1/nodejs/execute", strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := ts.client.Do(req)
		if err != nil {
			slow <- answer{0, err.Error()}
			return
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- answer{resp.StatusCode, string(rb)}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for ts.Registry().AdmissionStats().Live != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the stdin call never counted as live")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var info map[string]any
	_, info = ts.call(t, "GET", "/v2/code/info", nil)
	if lim, _ := info["data"].(map[string]any)["limits"].(map[string]any); lim["live_sessions"] != float64(1) {
		t.Errorf("/v2/code/info while the stdin call runs: limits %v, want live_sessions 1", lim)
	}
	b, _ := json.Marshal(map[string]any{"language": "javascript", "code": "1"})
	st, h, body = ts.secReq(t, "POST", "/v2/code/execute", "application/json", b, nil)
	refused("a one-shot while the stdin call runs", st, h, body)
	a := <-slow
	if a.st != 200 || !strings.Contains(a.body, `read 3`) {
		t.Errorf("the stdin call: %d %.300s", a.st, a.body)
	}
	if got := ts.Registry().AdmissionStats().Live; got != 0 {
		t.Errorf("live %d after the stdin call answered, want 0", got)
	}
}

// TestHeldCodeIsBounded: calls that wait in a busy session's queue hold
// their code (and their request's body) in aiod's memory. Under
// --held-code-tenant 3 MiB, a second 2 MiB call that would wait is refused
// at once with 429 naming the flag, a small call still runs, and once the
// queue drains nothing is held.
func TestHeldCodeIsBounded(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{HeldCodeTenant: 3 << 20})
	dir := ts.viewDir(t, "default")
	gate := dir + "/go"
	busy := "const fs = require('fs'); await new Promise(r => { const i = setInterval(() => { if (fs.existsSync('" + gate + "')) { clearInterval(i); r() } }, 20) }); console.log('done')"
	big := "// " + strings.Repeat("x", 2<<20) + "\nconsole.log('big')"
	type answer struct {
		st  int
		out any
	}
	answers := make(chan answer, 2)
	run := func(code string) {
		st, _, data := ts.exec(t, map[string]any{"language": "javascript", "session_id": "q", "code": code, "timeout": 120})
		answers <- answer{st, data["stdout"]}
	}
	waitHeld := func(n int) {
		deadline := time.Now().Add(60 * time.Second)
		for _, all := ts.core.Held("default"); all < int64(n); _, all = ts.core.Held("default") {
			if time.Now().After(deadline) {
				t.Fatalf("held %d bytes, want %d", all, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	go run(busy)
	waitHeld(len(busy))
	go run(big) // waits behind busy
	waitHeld(len(busy) + len(big))
	st, env, _ := ts.exec(t, map[string]any{"language": "javascript", "session_id": "q", "code": big})
	if msg, _ := env["message"].(string); st != 429 || !strings.Contains(msg, "--held-code-tenant") {
		t.Fatalf("a third call past the bound: %d %v", st, env)
	}
	if st, _, data := ts.exec(t, map[string]any{"language": "javascript", "code": "console.log(2 + 2)"}); st != 200 || data["stdout"] != "4\n" {
		t.Fatalf("a small call within the bound: %d %v", st, data)
	}
	if err := os.WriteFile(ts.hostPath(t, "default", gate), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if a := <-answers; a.st != 200 {
			t.Fatalf("a queued call: %d %v", a.st, a.out)
		}
	}
	if mine, all := ts.core.Held("default"); mine != 0 || all != 0 {
		t.Fatalf("after the queue drained: %d bytes held by the caller, %d in all", mine, all)
	}
}
