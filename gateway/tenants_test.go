package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"
	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aiod/aiod/gateway/guard"
	mcpsrv "github.com/aiod/aiod/gateway/mcp"
)

func TestCallerTenant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    guard.Caller
		want string
	}{
		{guard.Caller{Method: "jwt", Subject: "alice"}, "jwt:alice"},
		{guard.Caller{Method: "jwt", Subject: "alice", Ticket: true}, "jwt:alice"},
		{guard.Caller{Method: "token"}, "token"},
		{guard.Caller{Method: "token", Ticket: true}, "token"},
		{guard.Caller{Method: "none"}, "default"},
		{guard.Caller{}, "default"},
	} {
		if got := tc.c.Tenant(); got != tc.want {
			t.Errorf("%+v: tenant %q, want %q", tc.c, got, tc.want)
		}
	}
}

// TestTenantsOwnTheirNames runs two JWT subjects, alice and bob, on one
// gateway (real kernels and Node REPLs). On every surface the same session
// id is two sessions with their own state, and each one's sessions,
// execution ids and kernel ids are unknown to the other: listings leave
// them out, and naming them answers as for a name that does not exist.
// Two Python kernels in all (one "shared" session each), the rest in Node.
func TestTenantsOwnTheirNames(t *testing.T) {
	t.Parallel()
	key := testRSAKey()
	ts := startServer(t, Config{JWTPublicKey: pemOf(t, &key.PublicKey)})
	exp := time.Now().Add(time.Hour).Unix()
	aliceJWT := signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": "alice", "exp": exp})
	bobJWT := signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": "bob", "exp": exp})
	alice, bob := *ts, *ts
	alice.token, bob.token = aliceJWT, bobJWT

	// exec runs code as who and returns the answer's data.
	exec := func(t *testing.T, who *testServer, body map[string]any) map[string]any {
		t.Helper()
		st, env, d := who.exec(t, body)
		if st != 200 {
			t.Fatalf("execute %v: %d %v", body, st, env)
		}
		return d
	}
	py := func(sid, code string) map[string]any {
		return map[string]any{"language": "python", "session_id": sid, "code": code, "timeout": 120}
	}
	js := func(sid, code string) map[string]any {
		return map[string]any{"language": "javascript", "session_id": sid, "code": code, "timeout": 60}
	}
	notFound := func(t *testing.T, who *testServer, method, path string, body any) {
		t.Helper()
		st, env := who.call(t, method, path, body)
		if st != 404 {
			t.Errorf("%s %s: %d %v, want 404", method, path, st, env)
		}
	}
	// aliceStillHasX checks that alice's "shared" kernel kept its state.
	aliceStillHasX := func(t *testing.T) {
		t.Helper()
		d := exec(t, &alice, py("shared", "print(x)"))
		if d["stdout"] != "1\n" || d["fresh_runtime"] != nil {
			t.Fatalf("alice's session lost its state: %v", d)
		}
	}

	t.Run("v2 sessions", func(t *testing.T) {
		if d := exec(t, &alice, py("shared", "x = 1\nprint(x)")); d["stdout"] != "1\n" {
			t.Fatalf("alice sets x: %v", d)
		}
		d := exec(t, &bob, py("shared", "print(x)"))
		if d["status"] != "error" || !strings.Contains(fmt.Sprint(d["outputs"]), "NameError") {
			t.Fatalf("bob reads x in his own session of the same id: %v, want a NameError", d)
		}
		aliceStillHasX(t)
		exec(t, &alice, js("alice-only", "globalThis.mine = 'alice'"))
		exec(t, &alice, js("js", "globalThis.v = 'alice'"))
		if d := exec(t, &bob, js("js", "console.log(typeof v)")); d["stdout"] != "undefined\n" {
			t.Fatalf("bob's js session sees alice's global: %v", d)
		}
		_, env := bob.call(t, "GET", "/v2/code/sessions", nil)
		if got := sessionIDs(env); got != "js,shared" {
			t.Errorf("bob's sessions: %s, want js,shared", got)
		}
		_, env = alice.call(t, "GET", "/v2/code/sessions", nil)
		if got := sessionIDs(env); got != "alice-only,js,shared" {
			t.Errorf("alice's sessions: %s, want alice-only,js,shared", got)
		}
		notFound(t, &bob, "DELETE", "/v2/code/sessions/alice-only", nil)
		notFound(t, &bob, "POST", "/v2/code/sessions/alice-only/interrupt", nil)
		notFound(t, &bob, "POST", "/v2/code/sessions/alice-only/restart", nil)
		if d := exec(t, &alice, js("alice-only", "console.log(mine)")); d["stdout"] != "alice\n" || d["fresh_runtime"] != nil {
			t.Fatalf("alice's session after bob's delete, interrupt and restart: %v", d)
		}
		// Inspection asks the caller's own runtime.
		ask := func(who *testServer) any {
			_, env := who.call(t, "POST", "/v2/code/inspect", map[string]any{"language": "python", "session_id": "shared", "code": "x", "cursor_pos": 1})
			d, _ := env["data"].(map[string]any)
			return d["found"]
		}
		if a, b := ask(&alice), ask(&bob); a != true || b != false {
			t.Errorf("inspect x: alice found=%v, bob found=%v; want true, false", a, b)
		}
	})

	t.Run("v2 executions", func(t *testing.T) {
		// The same execution id, chosen by both: two executions.
		a := exec(t, &alice, map[string]any{"language": "python", "session_id": "shared", "code": "print('alice')", "execution_id": "same"})
		b := exec(t, &bob, map[string]any{"language": "python", "session_id": "shared", "code": "print('bob')", "execution_id": "same"})
		if a["stdout"] != "alice\n" || b["stdout"] != "bob\n" || b["replayed"] != nil || b["execution_id"] != "same" {
			t.Fatalf("the same execution_id: alice %v, bob %v", a, b)
		}
		for who, want := range map[*testServer]string{&alice: "alice\n", &bob: "bob\n"} {
			_, env := who.call(t, "GET", "/v2/code/executions/same", nil)
			if d, _ := env["data"].(map[string]any); d["stdout"] != want {
				t.Errorf("GET /v2/code/executions/same: %v, want stdout %q", env, want)
			}
		}
		if again := exec(t, &bob, map[string]any{"language": "python", "session_id": "shared", "code": "print('bob')", "execution_id": "same"}); again["replayed"] != true || again["stdout"] != "bob\n" {
			t.Errorf("bob's retry: %v, want his stored answer", again)
		}
		// An id only alice used.
		exec(t, &alice, map[string]any{"language": "python", "session_id": "shared", "code": "print('a')", "execution_id": "a-only"})
		for _, p := range []string{"/v2/code/executions/a-only", "/v2/code/executions/a-only?wait=1", "/v2/code/executions/a-only/events", "/v2/code/executions/a-only/events?after=1"} {
			notFound(t, &bob, "GET", p, nil)
		}
		notFound(t, &bob, "POST", "/v2/code/executions/a-only/interrupt", nil)
		// A running one: bob can neither see nor interrupt it, and his
		// interrupt of his own session of the same id leaves it alone. It
		// runs until the test opens its gate (or 60 s).
		gate, gateOnHost := streamGate(t, ts, "jwt:alice")
		done := make(chan map[string]any, 1)
		go func() {
			_, _, d := alice.exec(t, map[string]any{"language": "javascript", "session_id": "js", "execution_id": "a-run",
				"code": fmt.Sprintf("for (let i = 0; i < 600 && !require('fs').existsSync(%[1]q); i++) await new Promise(r => setTimeout(r, 100)); console.log(require('fs').existsSync(%[1]q) ? 'slept' : 'no gate')", gate)})
			done <- d
		}()
		waitRunning(t, &alice, "a-run")
		notFound(t, &bob, "GET", "/v2/code/executions/a-run", nil)
		notFound(t, &bob, "GET", "/v2/code/executions/a-run/events", nil)
		notFound(t, &bob, "POST", "/v2/code/executions/a-run/interrupt", nil)
		if st, env := bob.call(t, "POST", "/v2/code/sessions/js/interrupt", nil); st != 200 || env["message"] != "nothing was running" {
			t.Errorf("bob interrupts his own js session: %d %v", st, env)
		}
		if st, env := alice.call(t, "GET", "/v2/code/executions/a-run", nil); st != 200 || env["data"].(map[string]any)["state"] != "running" {
			t.Errorf("alice's execution after bob's calls: %d %v, want it running", st, env)
		}
		openGate(t, gateOnHost)
		if d := <-done; d["stdout"] != "slept\n" || d["status"] != "ok" {
			t.Fatalf("alice's running execution after bob's interrupts: %v", d)
		}
	})

	var aliceKernel, bobKernel string
	t.Run("Jupyter kernels API", func(t *testing.T) {
		kernels := func(who *testServer) []kernelModel {
			st, body := who.callRaw(t, "GET", "/api/kernels")
			var out []kernelModel
			if err := json.Unmarshal([]byte(body), &out); st != 200 || err != nil {
				t.Fatalf("GET /api/kernels: %d %s", st, body)
			}
			return out
		}
		ak, bk := kernels(&alice), kernels(&bob)
		if len(ak) != 1 || len(bk) != 1 || ak[0].SessionID != "shared" || bk[0].SessionID != "shared" || ak[0].ID == bk[0].ID {
			t.Fatalf("kernels: alice %+v, bob %+v; want one each, of their own", ak, bk)
		}
		aliceKernel, bobKernel = ak[0].ID, bk[0].ID
		if st, body := alice.callRaw(t, "GET", "/api/kernels/"+aliceKernel); st != 200 {
			t.Fatalf("alice's own kernel: %d %s", st, body)
		}
		for _, r := range []struct{ method, path string }{
			{"GET", "/api/kernels/" + aliceKernel},
			{"DELETE", "/api/kernels/" + aliceKernel},
			{"POST", "/api/kernels/" + aliceKernel + "/interrupt"},
			{"POST", "/api/kernels/" + aliceKernel + "/restart"},
		} {
			if st, body := bob.callRaw(t, r.method, r.path); st != 404 {
				t.Errorf("bob %s %s: %d %s, want 404", r.method, r.path, st, body)
			}
		}
		channels := func(id, jwt string) int {
			return wsDialStatus(t, ts.wsURL("/api/kernels/"+id+"/channels"), http.Header{"Authorization": {"Bearer " + jwt}}, "")
		}
		if st := channels(aliceKernel, bobJWT); st != 404 {
			t.Errorf("bob opens alice's kernel channels: HTTP %d, want 404", st)
		}
		if st := channels(aliceKernel, aliceJWT); st != 101 {
			t.Errorf("alice opens her kernel channels: HTTP %d, want 101", st)
		}
		aliceStillHasX(t)
	})

	t.Run("WebSocket", func(t *testing.T) {
		c := dialWSAuth(t, ts, bobJWT)
		refused := func(msg map[string]any) {
			t.Helper()
			sendJSON(t, c, msg)
			m := readJSON(t, c, time.Minute)
			if m.typ() != "error" || m.m["status"] != 404.0 || m.id() != msg["id"] {
				t.Errorf("bob's %v: %v, want a 404 error", msg, m.m)
			}
		}
		refused(map[string]any{"type": "watch", "id": "w", "session_id": "alice-only"})
		refused(map[string]any{"type": "interrupt", "id": "i", "session_id": "alice-only"})
		refused(map[string]any{"type": "resume", "id": "r", "execution_id": "a-only"})
		refused(map[string]any{"type": "resume", "id": "r2", "execution_id": "a-run", "after": 0})
		// Alice's execution id, sent by bob: his own execution.
		sendJSON(t, c, map[string]any{"type": "execute", "id": "e", "language": "python", "session_id": "shared", "code": "print('bob-ws')", "execution_id": "a-only"})
		res := readUntil(t, c, "result", "e", 2*time.Minute)
		if d, _ := res[len(res)-1].m["data"].(map[string]any); d["stdout"] != "bob-ws\n" || d["replayed"] != nil {
			t.Fatalf("bob's execute with alice's execution id: %v", res[len(res)-1].m)
		}
		// Watching "shared" follows bob's session only.
		sendJSON(t, c, map[string]any{"type": "watch", "id": "w2", "session_id": "shared"})
		if m := readJSON(t, c, time.Minute); m.typ() != "ok" {
			t.Fatalf("bob watches his shared session: %v", m.m)
		}
		exec(t, &alice, py("shared", "print('alice-secret')"))
		exec(t, &bob, py("shared", "print('bob-visible')"))
		for deadline := time.Now().Add(time.Minute); ; {
			m := readJSON(t, c, time.Until(deadline))
			s := mustJSONString(t, m.m)
			if strings.Contains(s, "alice-secret") {
				t.Fatalf("bob's watcher got alice's execution: %s", s)
			}
			if m.typ() == "result" && strings.Contains(s, "bob-visible") {
				break
			}
		}
		aliceStillHasX(t)
	})

	t.Run("MCP", func(t *testing.T) {
		ac, bc := mcpClient(t, ts, aliceJWT, nil), mcpClient(t, ts, bobJWT, nil)
		if r := callTool(t, ac, "execute_code", map[string]any{"language": "javascript", "session_id": "js", "code": "globalThis.m = 'alice-mcp'"}, nil); r.IsError {
			t.Fatalf("alice's execute_code: %q", texts(r))
		}
		if r := callTool(t, bc, "execute_code", map[string]any{"language": "javascript", "session_id": "js", "code": "typeof m"}, nil); r.IsError || !strings.Contains(texts(r), "undefined") {
			t.Fatalf("bob's execute_code in js: %q, want m undefined", texts(r))
		}
		// A client that sends aiod's own caller headers is still itself.
		spoof := mcpClientVia(t, ts, func(h http.Header) {
			h.Set("Authorization", "Bearer "+bobJWT)
			h.Set(mcpsrv.CallerHeader, "jwt:alice")
			h.Set(mcpsrv.TenantHeader, "jwt:alice")
		})
		for name, cs := range map[string]*mcp.ClientSession{"bob": bc, "bob claiming to be alice": spoof} {
			r := callTool(t, cs, "list_sessions", map[string]any{}, nil)
			if s := texts(r); r.IsError || !strings.Contains(s, `"session_id":"js"`) || strings.Contains(s, "alice-only") {
				t.Errorf("%s: list_sessions: %s", name, s)
			}
			if r := callTool(t, cs, "delete_session", map[string]any{"session_id": "alice-only"}, nil); !r.IsError || !strings.Contains(texts(r), "not found") {
				t.Errorf("%s: delete_session alice-only: %v %q", name, r.IsError, texts(r))
			}
		}
		if r := callTool(t, ac, "list_sessions", map[string]any{}, nil); !strings.Contains(texts(r), "alice-only") {
			t.Errorf("alice's list_sessions: %s", texts(r))
		}
		if ts.Registry().Get("jwt:alice", "javascript", "alice-only") == nil {
			t.Fatal("alice's session was deleted")
		}
	})

	t.Run("v1", func(t *testing.T) {
		// /v1/code and /v1/nodejs.
		alice.sdkOK(t, "POST", "v1/code/execute", map[string]any{"language": "javascript", "session_id": "js", "code": "globalThis.w = 1"})
		if r := bob.sdkOK(t, "POST", "v1/code/execute", map[string]any{"language": "javascript", "session_id": "js", "code": "console.log(typeof w)"}); r.data()["stdout"] != "undefined\n" {
			t.Errorf("bob's v1 code execute in js: %s", r.Raw)
		}
		nodeIDs := func(who *testServer) string {
			r := who.sdkOK(t, "GET", "v1/nodejs/sessions", nil)
			ss, _ := r.data()["sessions"].(map[string]any)
			return joinedKeys(ss)
		}
		if a, b := nodeIDs(&alice), nodeIDs(&bob); a != "alice-only,js" || b != "js" {
			t.Errorf("Node.js sessions: alice %s, bob %s", a, b)
		}
		bob.sdkStatus(t, "GET", "v1/nodejs/sessions/alice-only", nil, 404)
		bob.sdkStatus(t, "PATCH", "v1/nodejs/sessions/alice-only", map[string]any{"max_idle_time": 120}, 404)
		bob.sdkStatus(t, "DELETE", "v1/nodejs/sessions/alice-only", nil, 404)
		alice.sdkOK(t, "GET", "v1/nodejs/sessions/alice-only", nil)

		// /v1/jupyter.
		r := bob.sdkOK(t, "POST", "v1/jupyter/execute", map[string]any{"code": "print(x)", "session_id": "shared"})
		if r.data()["status"] != "error" || !strings.Contains(string(r.Raw), "NameError") {
			t.Errorf("bob's v1 jupyter execute in shared: %s", r.Raw)
		}
		if r := bob.sdkOK(t, "GET", "v1/jupyter/info", nil); r.data()["active_sessions"] != 1.0 {
			t.Errorf("bob's active sessions: %s", r.Raw)
		}
		bob.sdkOK(t, "DELETE", "v1/jupyter/sessions/shared", nil) // his own
		bob.sdkStatus(t, "DELETE", "v1/jupyter/sessions/shared", nil, 404)
		if r := bob.sdkOK(t, "DELETE", "v1/jupyter/sessions", nil); r.data()["count"] != 0.0 {
			t.Errorf("bob deletes all his jupyter sessions: %s", r.Raw)
		}
		jupyterIDs := func(who *testServer) string {
			r := who.sdkOK(t, "GET", "v1/jupyter/sessions", nil)
			ss, _ := r.data()["sessions"].(map[string]any)
			return joinedKeys(ss)
		}
		if a, b := jupyterIDs(&alice), jupyterIDs(&bob); a != "shared" || b != "" {
			t.Errorf("jupyter sessions: alice %q, bob %q", a, b)
		}
		aliceStillHasX(t)
		if st, body := bob.callRaw(t, "GET", "/api/kernels"); st != 200 || strings.TrimSpace(body) != "[]" {
			t.Errorf("bob's kernels after his delete: %d %s", st, body)
		}
		if bobKernel != "" {
			if st, _ := alice.callRaw(t, "GET", "/api/kernels/"+bobKernel); st != 404 {
				t.Errorf("bob's deleted kernel, asked by alice: %d", st)
			}
		}
		if aliceKernel != "" {
			if st, body := alice.callRaw(t, "GET", "/api/kernels/"+aliceKernel); st != 200 {
				t.Errorf("alice's kernel after bob's deletes: %d %s", st, body)
			}
		}
	})
}

// sessionIDs is the sorted, distinct session ids of a GET
// /v2/code/sessions answer, comma-separated.
func sessionIDs(env map[string]any) string {
	d, _ := env["data"].(map[string]any)
	ss, _ := d["sessions"].([]any)
	seen := map[string]any{}
	for _, s := range ss {
		m, _ := s.(map[string]any)
		seen[fmt.Sprint(m["session_id"])] = nil
	}
	return joinedKeys(seen)
}

// joinedKeys is m's keys, sorted, comma-separated.
func joinedKeys(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// headerSetter sets headers on every request.
type headerSetter struct {
	set  func(http.Header)
	next http.RoundTripper
}

func (h headerSetter) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	h.set(r.Header)
	return h.next.RoundTrip(r)
}

// mcpClientVia connects the Go SDK's client to ts with set applied to the
// headers of every request.
func mcpClientVia(t *testing.T, ts *testServer, set func(http.Header)) *mcp.ClientSession {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := mcp.NewClient(&mcp.Implementation{Name: "aiod-go-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: ts.URL + mcpsrv.Path, HTTPClient: &http.Client{Transport: headerSetter{set, tr}},
	}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}
