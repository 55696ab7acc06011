package gateway

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestBadRequestsGetClearErrors(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{MaxBody: 1 << 20})
	cases := []struct {
		name, body string
		status     int
		mention    string
	}{
		{"not json", `{"language": "python", "code": `, 422, "not valid JSON"},
		{"array body", `[1,2]`, 422, "JSON object"},
		{"missing code", `{"language":"python"}`, 422, "'code'"},
		{"missing language", `{"code":"1"}`, 422, "'language'"},
		{"code not a string", `{"language":"python","code":5}`, 422, "'code': must be a string"},
		{"language wrong type", `{"language":["python"],"code":"1"}`, 422, "'language'"},
		{"unsupported language", `{"language":"ruby","code":"1"}`, 422, `unsupported language "ruby"`},
		{"timeout zero", `{"language":"python","code":"1","timeout":0}`, 422, "'timeout'"},
		{"timeout too big", `{"language":"python","code":"1","timeout":901}`, 422, "at most 900"},
		{"timeout a word", `{"language":"python","code":"1","timeout":"soon"}`, 422, "'timeout'"},
		{"session id with slash", `{"language":"python","code":"1","session_id":"a/b"}`, 422, "'session_id'"},
		{"session id a number", `{"language":"python","code":"1","session_id":7}`, 422, "'session_id'"},
		{"empty body", ``, 422, "'language'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, env := ts.call(t, "POST", "/v2/code/execute", c.body)
			msg, _ := env["message"].(string)
			if st != c.status || env["success"] != false || env["data"] != nil || !strings.Contains(msg, c.mention) {
				t.Fatalf("status %d envelope %v; want %d mentioning %q", st, env, c.status, c.mention)
			}
		})
	}
	if got := rawRequest(t, ts, "POST /v2/code/execute HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2097152\r\n\r\n{"); !strings.HasPrefix(got, "HTTP/1.1 413") || !strings.Contains(got, "limit") {
		t.Fatalf("oversized body answered %q", got)
	}
	if got := rawRequest(t, ts, "POST /v2/code/execute HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\nContent-Length: 2097152\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 413") {
		t.Fatalf("oversized upload with Expect answered %q", got)
	}
	st, env := ts.call(t, "DELETE", "/v2/code/sessions/nope", nil)
	if st != 404 || env["success"] != false {
		t.Fatalf("unknown session delete: %d %v", st, env)
	}
	st, _ = ts.call(t, "GET", "/v2/nothing", nil)
	if st != 404 {
		t.Fatalf("unknown route: %d", st)
	}
}

// rawRequest writes req on a fresh connection and returns what comes back.
func rawRequest(t testing.TB, ts *testServer, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestRequestWithoutHostHeaderIsRejectedCleanly(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	if got := rawRequest(t, ts, "POST /v2/code/execute HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"); !strings.HasPrefix(got, "HTTP/1.1 400") {
		t.Fatalf("answer = %q", got)
	}
}

func TestIdleSessionsAreReclaimed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{KernelIdle: time.Second, ReapInterval: 200 * time.Millisecond})
	_, _, data := ts.exec(t, map[string]any{"language": "python", "code": "x = 1", "session_id": "idle"})
	if data["status"] != "ok" {
		t.Fatalf("exec: %v", data)
	}
	pid := ts.Registry().Get("default", "python", "idle").Runtime().Info().PID
	deadline := time.Now().Add(15 * time.Second)
	for ts.Registry().Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("idle session was not reclaimed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("kernel %d outlived its reclaimed session", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Its state was saved before the reclaim (a state directory is set):
	// DELETE forgets it, and then it is gone.
	if st, _ := ts.call(t, "DELETE", "/v2/code/sessions/idle", nil); st != 200 {
		t.Fatalf("delete the saved session: %d", st)
	}
	if st, _ := ts.call(t, "DELETE", "/v2/code/sessions/idle", nil); st != 404 {
		t.Fatalf("reclaimed and deleted session still deletable: %d", st)
	}
}

func TestTokenIsRequiredWhenConfigured(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Token: "s3cret"})
	if st, _ := ts.call(t, "GET", "/v2/code/info", nil); st != 401 {
		t.Fatalf("no token: %d", st)
	}
	if st, _ := ts.call(t, "GET", "/v2/code/info?token=wrong", nil); st != 401 {
		t.Fatalf("wrong token: %d", st)
	}
	if st, _ := ts.call(t, "GET", "/v2/code/info?token=s3cret", nil); st != 200 {
		t.Fatalf("query token: %d", st)
	}
	if st, _ := ts.call(t, "GET", "/healthz", nil); st != 200 {
		t.Fatalf("healthz needs no token: %d", st)
	}
	got := rawRequest(t, ts, "GET /v2/code/info HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("bearer token: %.60q", got)
	}
}
