package gateway

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestV1NodeExecute(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	exec := func(body map[string]any) v1Reply {
		t.Helper()
		return ts.sdkOK(t, "POST", "v1/nodejs/execute", body)
	}
	r := exec(map[string]any{"code": "console.log('hi'); console.error('oops')"})
	d := r.data()
	o := v1Outs(d)
	if d["language"] != "javascript" || d["stdout"] != "hi\n" || d["stderr"] != "oops\n" || d["exit_code"] != 0.0 ||
		d["session_id"] != nil || len(o) != 2 || len(o[0]) != 8 || o[0]["execution_count"] != nil {
		t.Fatalf("one-shot: %s", r.Raw)
	}
	// Empty streams are "" (the SDK's default), not null.
	r = exec(map[string]any{"code": "1 + 1"})
	if r.data()["stdout"] != "" || r.data()["stderr"] != "" || v1Outs(r.data())[0]["output_type"] != "execute_result" {
		t.Fatalf("no output: %s", r.Raw)
	}
	// A thrown error: status error, a non-zero exit_code, an error output.
	r = exec(map[string]any{"code": "throw new RangeError('r')"})
	o = v1Outs(r.data())
	if r.data()["status"] != "error" || r.data()["exit_code"] != 1.0 || r.Body["success"] != false ||
		len(o) == 0 || o[len(o)-1]["ename"] != "RangeError" {
		t.Fatalf("thrown: %s", r.Raw)
	}
	// Timeout: exit_code is an int (124), never null.
	start := time.Now()
	r = exec(map[string]any{"code": "while (true) {}", "timeout": 1, "session_id": "loop"})
	if r.data()["status"] != "timeout" || r.data()["exit_code"] != 124.0 {
		t.Fatalf("timeout: %s after %s", r.Raw, time.Since(start))
	}
	// Every optional field null.
	r = exec(map[string]any{"code": "console.log(2)", "timeout": nil, "stdin": nil, "files": nil, "stateful": nil,
		"session_id": nil, "cwd": nil, "version": nil})
	if r.data()["stdout"] != "2\n" {
		t.Fatalf("nulls: %s", r.Raw)
	}
	// stateful without session_id makes one; session_id alone is stateful.
	r = exec(map[string]any{"code": "globalThis.k = 7", "stateful": true})
	sid, _ := r.data()["session_id"].(string)
	if sid == "" {
		t.Fatalf("stateful: %s", r.Raw)
	}
	r = exec(map[string]any{"code": "console.log(k)", "session_id": sid})
	if r.data()["stdout"] != "7\n" {
		t.Fatalf("stateful reuse: %s", r.Raw)
	}
	// Top-level await in a session.
	r = exec(map[string]any{"code": "const v = await Promise.resolve(5); console.log(v)", "session_id": sid})
	if r.data()["stdout"] != "5\n" {
		t.Fatalf("await: %s", r.Raw)
	}

	// stdin: a node process of its own reads it.
	r = exec(map[string]any{"code": "const s = require('fs').readFileSync(0, 'utf8'); console.log(s.toUpperCase())", "stdin": "hello\n"})
	if r.data()["stdout"] != "HELLO\n\n" || r.data()["exit_code"] != 0.0 || r.data()["execution_count"] != 1.0 {
		t.Fatalf("stdin: %s", r.Raw)
	}
	r = exec(map[string]any{"code": "process.stdin.on('data', d => process.exitCode = Number(d))", "stdin": "3"})
	if r.data()["status"] != "error" || r.data()["exit_code"] != 3.0 {
		t.Fatalf("stdin exit code: %s", r.Raw)
	}
	r = exec(map[string]any{"code": "setInterval(() => {}, 1000)", "stdin": "x", "timeout": 1})
	if r.data()["status"] != "timeout" || r.data()["exit_code"] != 124.0 {
		t.Fatalf("stdin timeout: %s", r.Raw)
	}
	r = exec(map[string]any{"code": "throw new Error('boom')", "stdin": "x"})
	if r.data()["status"] != "error" || r.data()["exit_code"] != 1.0 || !strings.Contains(fmt.Sprint(r.data()["stderr"]), "boom") {
		t.Fatalf("stdin error: %s", r.Raw)
	}
	// files: written into the execution folder, next to relative requires.
	files := map[string]any{"data.txt": "content", "lib/m.js": "module.exports = 40"}
	r = exec(map[string]any{"code": "console.log(require('fs').readFileSync('data.txt', 'utf8'), require('./lib/m') + 2)", "files": files})
	if r.data()["stdout"] != "content 42\n" {
		t.Fatalf("files, one-shot: %s", r.Raw)
	}
	r = exec(map[string]any{"code": "const s = require('fs').readFileSync(0, 'utf8'); console.log(s, require('./lib/m') + 2)", "files": files, "stdin": "in"})
	if r.data()["stdout"] != "in 42\n" {
		t.Fatalf("files with stdin: %s", r.Raw)
	}
	dir := ts.viewDir(t, "default")
	r = exec(map[string]any{"code": "console.log(require('fs').readFileSync('data.txt', 'utf8'))", "files": files, "session_id": "f", "cwd": dir})
	if r.data()["stdout"] != "content\n" {
		t.Fatalf("files, session: %s", r.Raw)
	}
	if b, _ := os.ReadFile(ts.hostPath(t, "default", filepath.Join(dir, "lib/m.js"))); string(b) != "module.exports = 40" {
		t.Fatalf("files were not written into cwd")
	}
	// version: accepted; another major runs on the one Node.js, and says so.
	r = exec(map[string]any{"code": "1", "version": "node24"})
	if !strings.Contains(fmt.Sprint(r.Body["message"]), "node24") && !strings.HasPrefix(ts.Environment().Node.Version, "24") {
		t.Fatalf("version note: %s", r.Raw)
	}

	ts.sdk422(t, "POST", "v1/nodejs/execute", map[string]any{"timeout": 3}, "body", "code")
	ts.sdk422(t, "POST", "v1/nodejs/execute", map[string]any{"code": "1", "version": "node8"}, "body", "version")
	ts.sdk422(t, "POST", "v1/nodejs/execute", map[string]any{"code": "1", "stdin": "x", "session_id": "f"}, "body", "stdin")
	ts.sdk422(t, "POST", "v1/nodejs/execute", map[string]any{"code": "1", "files": map[string]any{"../x": "y"}}, "body", "files")
	ts.sdk422(t, "POST", "v1/nodejs/execute", map[string]any{"code": "1", "files": []any{"x"}}, "body", "files")

	info := ts.sdkOK(t, "GET", "v1/nodejs/info", nil)
	if info.data()["node_version"] == "" || info.data()["npm_version"] == "" || info.data()["error"] != nil {
		t.Fatalf("nodejs info: %s", info.Raw)
	}
}

func TestV1NodeSessions(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	// Empty list: an object.
	l := ts.sdkOK(t, "GET", "v1/nodejs/sessions", nil)
	if m, ok := l.data()["sessions"].(map[string]any); !ok || len(m) != 0 {
		t.Fatalf("empty list: %s", l.Raw)
	}
	// create_session() without arguments: no body.
	c := ts.sdkOK(t, "POST", "v1/nodejs/sessions", nil)
	sid, _ := c.data()["session_id"].(string)
	s := c.data()["session"].(map[string]any)
	if sid == "" || c.data()["created"] != true || s["max_idle_time"] != 1800000.0 || s["state"] != "IDLE" || s["cwd"] == "" {
		t.Fatalf("create: %s", c.Raw)
	}
	if ms := s["created_at"].(float64); time.Since(time.UnixMilli(int64(ms))) > time.Minute || time.Since(time.UnixMilli(int64(ms))) < 0 {
		t.Fatalf("created_at %v is not epoch milliseconds", ms)
	}
	// With a body (and the query version), then the same id again.
	dir := ts.viewDir(t, "default")
	c = ts.sdkOK(t, "POST", "v1/nodejs/sessions?version=node20", map[string]any{"session_id": "ns", "cwd": dir, "max_idle_time": 120})
	s = c.data()["session"].(map[string]any)
	if c.data()["created"] != true || s["cwd"] != dir || s["max_idle_time"] != 120000.0 {
		t.Fatalf("create with body: %s", c.Raw)
	}
	c = ts.sdkOK(t, "POST", "v1/nodejs/sessions", map[string]any{"session_id": "ns", "cwd": nil, "max_idle_time": nil})
	if c.data()["created"] != false {
		t.Fatalf("create again: %s", c.Raw)
	}
	// Above aiod's native idle: capped, and the message says so.
	c = ts.sdkOK(t, "POST", "v1/nodejs/sessions", map[string]any{"session_id": "long", "max_idle_time": 86400})
	if c.data()["session"].(map[string]any)["max_idle_time"] != 1800000.0 || !strings.Contains(fmt.Sprint(c.Body["message"]), "1800") {
		t.Fatalf("capped idle: %s", c.Raw)
	}
	ts.sdk422(t, "POST", "v1/nodejs/sessions", map[string]any{"max_idle_time": 59}, "body", "max_idle_time")
	ts.sdk422(t, "POST", "v1/nodejs/sessions", map[string]any{"max_idle_time": 86401}, "body", "max_idle_time")
	ts.sdk422(t, "POST", "v1/nodejs/sessions?version=7", nil, "query", "version")

	// The session runs in its cwd, and execute sees it.
	r := ts.sdkOK(t, "POST", "v1/nodejs/execute", map[string]any{"code": "console.log(process.cwd())", "session_id": "ns"})
	if r.data()["stdout"] != dir+"\n" || r.data()["execution_count"] != 1.0 {
		t.Fatalf("session cwd: %s", r.Raw)
	}
	g := ts.sdkOK(t, "GET", "v1/nodejs/sessions/ns?version=20", nil)
	gs := g.data()["session"].(map[string]any)
	if gs["session_id"] != "ns" || gs["last_used"].(float64) < gs["created_at"].(float64) {
		t.Fatalf("get: %s", g.Raw)
	}
	// A busy session is EXECUTING: the call waits (up to 60 s) for a gate
	// that the test opens once it has seen that state.
	gate, gateOnHost := streamGate(t, ts, "default")
	busy := fmt.Sprintf("const fs = require('fs')\nfor (let i = 0; i < 600 && !fs.existsSync(%[1]q); i++) await new Promise(r => setTimeout(r, 100))\nconsole.log(fs.existsSync(%[1]q) ? 'opened' : 'no gate')", gate)
	done := make(chan v1Reply, 1)
	go func() {
		done <- ts.sdk(t, "POST", "v1/nodejs/execute", map[string]any{"code": busy, "session_id": "ns"})
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		g = ts.sdkOK(t, "GET", "v1/nodejs/sessions/ns", nil)
		if g.data()["session"].(map[string]any)["state"] == "EXECUTING" {
			break
		}
		if time.Now().After(deadline) {
			openGate(t, gateOnHost)
			t.Fatalf("never EXECUTING: %s", g.Raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	openGate(t, gateOnHost)
	if r := <-done; r.Status != 200 || r.data()["stdout"] != "opened\n" {
		t.Fatalf("slow call: %s", r.Raw)
	}

	// PATCH with no body changes nothing; with a body, cwd and idle.
	u := ts.sdkOK(t, "PATCH", "v1/nodejs/sessions/ns", nil)
	if u.data()["updated"] != false {
		t.Fatalf("empty patch: %s", u.Raw)
	}
	other := ts.viewDir(t, "default")
	u = ts.sdkOK(t, "PATCH", "v1/nodejs/sessions/ns", map[string]any{"cwd": other, "max_idle_time": 60})
	us := u.data()["session"].(map[string]any)
	if u.data()["updated"] != true || us["cwd"] != other || us["max_idle_time"] != 60000.0 {
		t.Fatalf("patch: %s", u.Raw)
	}
	r = ts.sdkOK(t, "POST", "v1/nodejs/execute", map[string]any{"code": "console.log(process.cwd())", "session_id": "ns"})
	if r.data()["stdout"] != other+"\n" {
		t.Fatalf("cwd after patch: %s", r.Raw)
	}
	// Raising above the creation value is refused with a note.
	u = ts.sdkOK(t, "PATCH", "v1/nodejs/sessions/ns", map[string]any{"max_idle_time": 600})
	if u.data()["session"].(map[string]any)["max_idle_time"] != 120000.0 || !strings.Contains(fmt.Sprint(u.Body["message"]), "cannot be raised") {
		t.Fatalf("raise idle: %s", u.Raw)
	}
	ts.sdk422(t, "PATCH", "v1/nodejs/sessions/ns", map[string]any{"max_idle_time": 10}, "body", "max_idle_time")

	l = ts.sdkOK(t, "GET", "v1/nodejs/sessions", nil)
	if m := l.data()["sessions"].(map[string]any); len(m) != 3 || m["ns"] == nil || m[sid] == nil {
		t.Fatalf("list: %s", l.Raw)
	}
	// Unknown ids: 404 with the envelope.
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		ts.sdkStatus(t, m, "v1/nodejs/sessions/nope", nil, http.StatusNotFound)
	}
	del := ts.sdkOK(t, "DELETE", "v1/nodejs/sessions/ns", nil)
	if del.data()["deleted"] != true || ts.Registry().Get("default", "javascript", "ns") != nil {
		t.Fatalf("delete: %s", del.Raw)
	}
	ts.sdkStatus(t, "DELETE", "v1/nodejs/sessions/ns", nil, http.StatusNotFound)
}

// TestV1NodeIdle: a session created with a max_idle_time is reclaimed by it,
// and one lowered by PATCH is reclaimed by the lower value.
func TestV1NodeIdle(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{ReapInterval: 100 * time.Millisecond})
	ts.sdkOK(t, "POST", "v1/nodejs/sessions", map[string]any{"session_id": "a", "max_idle_time": 60})
	ts.sdkOK(t, "POST", "v1/nodejs/sessions", map[string]any{"session_id": "b"})
	if got := ts.Registry().Get("default", "javascript", "a").Backend.Idle; got != time.Minute {
		t.Fatalf("session a reaps after %s, want 1m", got)
	}
	ts.sdkOK(t, "PATCH", "v1/nodejs/sessions/b", map[string]any{"max_idle_time": 60})
	if ts.Registry().ReapIdle(time.Now().Add(30*time.Second)) != 0 {
		t.Fatal("sessions were reclaimed before their max_idle_time")
	}
	// The registry's reaper, as of two minutes from now, takes a (created
	// with 60 s) and b (lowered to 60 s by PATCH).
	ts.Registry().ReapIdle(time.Now().Add(2 * time.Minute))
	if ts.Registry().Get("default", "javascript", "a") != nil || ts.Registry().Get("default", "javascript", "b") != nil {
		t.Fatal("a session outlived its max_idle_time")
	}
	l := ts.sdkOK(t, "GET", "v1/nodejs/sessions", nil)
	if len(l.data()["sessions"].(map[string]any)) != 0 {
		t.Fatalf("sessions listed after reclaim: %s", l.Raw)
	}
}

// TestV1NodeWithoutNode: no node on PATH → 503 on execute, and the info
// route still answers its model with error set.
func TestV1NodeWithoutNode(t *testing.T) {
	t.Setenv("PATH", "/nonexistent")
	ts := startServer(t, Config{})
	r := ts.sdkStatus(t, "POST", "v1/nodejs/execute", map[string]any{"code": "1"}, http.StatusServiceUnavailable)
	if !strings.Contains(fmt.Sprint(r.Body["message"]), "node") {
		t.Fatalf("503: %s", r.Raw)
	}
	ts.sdkStatus(t, "POST", "v1/code/execute", map[string]any{"language": "javascript", "code": "1"}, http.StatusServiceUnavailable)
	ts.sdkStatus(t, "POST", "v1/nodejs/sessions", nil, http.StatusServiceUnavailable)
	info := ts.sdkOK(t, "GET", "v1/nodejs/info", nil)
	if info.data()["error"] == nil {
		t.Fatalf("info without node: %s", info.Raw)
	}
}
