package gateway

// What a new user tripped on (issue 13), each against a live gateway with
// real kernels, Node.js REPLs and WebSocket clients.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/execution"
)

// kernelOf is the kernel id of the REST session sid.
func kernelOf(t *testing.T, ts *testServer, sid string) string {
	t.Helper()
	var list []kernelModel
	getJSON(t, ts.URL+"/api/kernels", 200, &list)
	for _, k := range list {
		if k.SessionID == sid {
			return k.ID
		}
	}
	t.Fatalf("no kernel for session %q in %+v", sid, list)
	return ""
}

// Item 1: ids in paths are percent-decoded once, on v2, v1 and the Jupyter
// kernels API alike.
func TestPercentEncodedPathIDs(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	js := func(sid string) {
		t.Helper()
		if _, env, _ := ts.exec(t, map[string]any{"language": "javascript", "code": "1", "session_id": sid}); env["success"] != true {
			t.Fatalf("create %q: %v", sid, env)
		}
	}
	// v1 Node.js: GET and DELETE of "n@x" sent encoded.
	js("n@x")
	r := ts.sdk(t, "GET", "v1/nodejs/sessions/n%40x", nil)
	if sess, _ := r.data()["session"].(map[string]any); r.Status != 200 || sess["session_id"] != "n@x" {
		t.Fatalf("GET /v1/nodejs/sessions/n%%40x: %d %s", r.Status, r.Raw)
	}
	if r := ts.sdk(t, "DELETE", "v1/nodejs/sessions/n%40x", nil); r.Status != 200 {
		t.Fatalf("DELETE /v1/nodejs/sessions/n%%40x: %d %s", r.Status, r.Raw)
	}
	// v2: the notebook page's Restart of a JavaScript session sends
	// encodeURIComponent("me@lap:1").
	js("me@lap:1")
	st, env := ts.call(t, "DELETE", "/v2/code/sessions/me%40lap%3A1", nil)
	if st != 200 || env["data"].(map[string]any)["session_id"] != "me@lap:1" {
		t.Fatalf("DELETE /v2/code/sessions/me%%40lap%%3A1: %d %v", st, env)
	}
	if ts.Registry().Get("default", "javascript", "me@lap:1") != nil {
		t.Fatal("the session still runs after its encoded DELETE")
	}
	// The raw form still works, and a broken escape names the parameter.
	js("raw@id")
	if st, env := ts.call(t, "DELETE", "/v2/code/sessions/raw@id", nil); st != 200 {
		t.Fatalf("raw DELETE: %d %v", st, env)
	}
	if got := rawRequest(t, ts, "DELETE /v2/code/sessions/bad%zz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 422") || !strings.Contains(got, "'id'") {
		t.Fatalf("DELETE with a broken escape: %q", got)
	}
	// v1 Jupyter and the kernels API, on one Python kernel session.
	if _, env, _ := ts.exec(t, map[string]any{"language": "python", "code": "1", "session_id": "py@host:2"}); env["success"] != true {
		t.Fatalf("python session: %v", env)
	}
	kid := kernelOf(t, ts, "py@host:2")
	var km kernelModel
	getJSON(t, ts.URL+"/api/kernels/"+strings.ReplaceAll(kid, "-", "%2D"), 200, &km)
	if km.ID != kid {
		t.Fatalf("GET /api/kernels with an encoded id: %+v", km)
	}
	if r := ts.sdk(t, "DELETE", "v1/jupyter/sessions/py%40host%3A2", nil); r.Status != 200 {
		t.Fatalf("DELETE /v1/jupyter/sessions/py%%40host%%3A2: %d %s", r.Status, r.Raw)
	}
	if ts.Registry().Len() != 0 {
		t.Fatalf("sessions left: %d", ts.Registry().Len())
	}
}

// Item 2: a call on an id whose session ended (idle, deleted, restarted by
// a client) gets fresh_runtime and a message that says why.
func TestEndedSessionsSayWhy(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{NativeIdle: time.Second, ReapInterval: 200 * time.Millisecond})
	run := func(lang, sid, code string) (map[string]any, map[string]any) {
		t.Helper()
		st, env, data := ts.exec(t, map[string]any{"language": lang, "code": code, "session_id": sid})
		if st != 200 {
			t.Fatalf("exec %q in %q: %d %v", code, sid, st, env)
		}
		return env, data
	}
	fresh := func(env, data map[string]any, want string) {
		t.Helper()
		msg, _ := env["message"].(string)
		if data["fresh_runtime"] != true || !strings.Contains(msg, want) {
			t.Fatalf("fresh_runtime %v, message %q; want true and %q", data["fresh_runtime"], msg, want)
		}
	}

	// Reclaimed by the idle reaper (with nothing a snapshot keeps: a let is
	// not a global's property, so the session comes back fresh).
	run("javascript", "idle-1", "let x = 1")
	for deadline := time.Now().Add(30 * time.Second); ts.Registry().Get("default", "javascript", "idle-1") != nil; {
		if time.Now().After(deadline) {
			t.Fatal("the idle session was not reclaimed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	env, data := run("javascript", "idle-1", "typeof x")
	fresh(env, data, "reclaimed after being idle for ")
	fresh(env, data, " (limit 1 s)")
	if msg := env["message"].(string); !strings.Contains(msg, "fresh javascript process") || !strings.Contains(msg, "earlier state is gone") {
		t.Fatalf("message %q", msg)
	}
	// Only the first call after the loss is told.
	if env, data := run("javascript", "idle-1", "1"); data["fresh_runtime"] != nil || env["message"] != "ok" {
		t.Fatalf("second call after the reclaim: %v", env)
	}

	// Deleted by the caller itself.
	run("javascript", "del-1", "var y = 1")
	if st, _ := ts.call(t, "DELETE", "/v2/code/sessions/del-1", nil); st != 200 {
		t.Fatalf("delete: %d", st)
	}
	env, data = run("javascript", "del-1", "typeof y")
	fresh(env, data, "because the session was deleted, ")
	if data["stdout"] != "" || !strings.Contains(mustJSONString(t, data["outputs"]), "undefined") {
		t.Fatalf("the deleted session's state survived: %v", data)
	}

	// A fresh id is not fresh_runtime.
	if env, data := run("javascript", "new-1", "1"); data["fresh_runtime"] != nil || env["message"] != "ok" {
		t.Fatalf("a new id: %v", env)
	}

	// Restarted by another client through the Jupyter kernels API.
	run("python", "rs-1", "z = 1")
	kid := kernelOf(t, ts, "rs-1")
	if st, b := httpDo(t, "POST", ts.URL+"/api/kernels/"+kid+"/restart", "", ""); st != 200 {
		t.Fatalf("restart: %d %s", st, b)
	}
	env, data = run("python", "rs-1", "z")
	fresh(env, data, "because the kernel was restarted by a client (Jupyter API restart)")
	if data["status"] != "error" || !strings.Contains(env["message"].(string), "NameError") {
		t.Fatalf("after the restart: %v", env)
	}
}

// Item 4: v2 checks types strictly and names the fields it ignored; v1
// keeps accepting what the SDK sends.
func TestV2StrictTypesAndUnknownFields(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	st, env := ts.call(t, "POST", "/v2/code/execute", `{"language":"javascript","code":"1","timeout":"5"}`)
	if msg, _ := env["message"].(string); st != 422 || !strings.Contains(msg, "'timeout': must be a number, got a string") {
		t.Fatalf(`"timeout": "5" on v2: %d %v`, st, env)
	}
	// A field that looks like a misspelt session_id is refused, naming it:
	// the call would run in a throwaway runtime and answer success.
	for _, typo := range []string{"sesion_id", "sessionId", "session", "sid"} {
		st, env := ts.call(t, "POST", "/v2/code/execute", fmt.Sprintf(`{"language":"javascript","code":"1",%q:"typo"}`, typo))
		if msg, _ := env["message"].(string); st != 422 || !strings.Contains(msg, fmt.Sprintf("'%s': is not a field; did you mean \"session_id\"?", typo)) {
			t.Fatalf("%q on v2: %d %v", typo, st, env)
		}
	}
	// Other unknown fields are named in warnings; so is a look-alike when
	// session_id is given too.
	want := []any{`unknown field "sesion_id" ignored`, `unknown field "workdir" ignored`}
	_, env, data := ts.exec(t, map[string]any{"language": "javascript", "code": "console.log(7)",
		"session_id": "kept", "sesion_id": "typo", "workdir": "/tmp"})
	if env["success"] != true || !reflect.DeepEqual(data["warnings"], want) || data["session_id"] != "kept" {
		t.Fatalf("unknown fields: %v", env)
	}
	// Known fields only: no warnings key at all.
	if _, _, data := ts.exec(t, map[string]any{"language": "javascript", "code": "1", "timeout": 5}); data["warnings"] != nil {
		t.Fatalf("warnings without unknown fields: %v", data)
	}
	// The WebSocket's execute message is v2's body plus type and id.
	c := dialWS(t, ts, nil)
	sendJSON(t, c, map[string]any{"type": "execute", "id": "w1", "language": "javascript", "code": "1", "workdir": "x"})
	msgs := readUntil(t, c, "result", "w1", time.Minute)
	res := msgs[len(msgs)-1].m
	if w := res["data"].(map[string]any)["warnings"]; !reflect.DeepEqual(w, []any{`unknown field "workdir" ignored`}) {
		t.Fatalf("WebSocket warnings: %v", res)
	}
	sendJSON(t, c, map[string]any{"type": "execute", "id": "w2", "language": "javascript", "code": "1", "sesion_id": "x"})
	msgs = readUntil(t, c, "error", "w2", time.Minute)
	if m := fmt.Sprint(msgs[len(msgs)-1].m); !strings.Contains(m, "'sesion_id': is not a field") {
		t.Fatalf("WebSocket look-alike of session_id: %v", m)
	}
	// v1 takes the string, as pydantic's lax mode does.
	r := ts.sdk(t, "POST", "v1/code/execute", map[string]any{"language": "javascript", "code": "console.log(2)", "timeout": "5"})
	if r.Status != 200 || r.Body["success"] != true {
		t.Fatalf(`"timeout": "5" on v1: %d %s`, r.Status, r.Raw)
	}
}

// Item 5: help (len?, %pinfo) arrives as an execute_reply payload; it
// becomes a display_data output on REST v2, v1 and the WebSocket, and
// set_next_input becomes data.next_input.
func TestHelpPagerPayloadsBecomeOutputs(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	page := func(outs []map[string]any) map[string]any {
		t.Helper()
		for _, o := range outs {
			if o["output_type"] == "display_data" {
				d, _ := o["data"].(map[string]any)
				return d
			}
		}
		t.Fatalf("no display_data in %v", outs)
		return nil
	}
	_, env, data := ts.exec(t, map[string]any{"language": "python", "code": "len?", "session_id": "help"})
	d := page(outputs(data))
	plain, _ := d["text/plain"].(string)
	if env["success"] != true || !strings.Contains(plain, "Return the number of items in a container") || strings.Contains(plain, "\x1b") {
		t.Fatalf("len? on v2: %v", env)
	}
	_, env, data = ts.exec(t, map[string]any{"language": "python", "code": "%pinfo len", "session_id": "help"})
	if d := page(outputs(data)); !strings.Contains(d["text/plain"].(string), "Signature") {
		t.Fatalf("%%pinfo on v2: %v", env)
	}
	r := ts.sdk(t, "POST", "v1/jupyter/execute", map[string]any{"code": "len?", "session_id": "help"})
	if d := page(v1Outs(r.data())); r.Status != 200 || !strings.Contains(d["text/plain"].(string), "Return the number of items") {
		t.Fatalf("len? on v1: %d %s", r.Status, r.Raw)
	}
	// The WebSocket streams the same output before its result.
	c := dialWS(t, ts, nil)
	sendJSON(t, c, map[string]any{"type": "execute", "id": 5, "language": "python", "code": "len?", "session_id": "help"})
	msgs := readUntil(t, c, "result", float64(5), time.Minute)
	var live []map[string]any
	for _, m := range msgs {
		if m.typ() == "output" {
			live = append(live, m.m["output"].(map[string]any))
		}
	}
	if d := page(live); !strings.Contains(d["text/plain"].(string), "Return the number of items") {
		t.Fatalf("len? over the WebSocket: %v", live)
	}
	res := msgs[len(msgs)-1].m["data"].(map[string]any)
	if d := page(outputs(res)); !strings.Contains(d["text/plain"].(string), "Return the number of items") {
		t.Fatalf("len? result over the WebSocket: %v", res)
	}
	_, env, data = ts.exec(t, map[string]any{"language": "python", "code": "get_ipython().set_next_input('print(41 + 1)')", "session_id": "help"})
	if env["success"] != true || data["next_input"] != "print(41 + 1)" {
		t.Fatalf("set_next_input: %v", env)
	}
}

// Item 6: REST answers (v2 and v1) carry stream text without ANSI escapes,
// by the rule the notebook page shares (web/testdata/ansi.json); the
// WebSocket's live outputs and the Jupyter API keep them.
func TestRESTStripsANSIFromStreams(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "web", "testdata", "ansi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct{ Name, In, Plain string }
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Cases) == 0 {
		t.Fatalf("ansi.json: %v", err)
	}
	var raw, plain strings.Builder
	for _, c := range doc.Cases {
		raw.WriteString(c.In + "\n")
		plain.WriteString(c.Plain + "\n")
		if execution.StripANSI(c.In) != c.Plain {
			t.Fatalf("case %q: StripANSI disagrees with ansi.json", c.Name)
		}
	}
	lit, _ := json.Marshal(raw.String()) // a JSON string is a Python literal
	code := "import sys\nsys.stdout.write(" + string(lit) + ")\nsys.stdout.flush()"

	ts := startServer(t, Config{})
	_, env, data := ts.exec(t, map[string]any{"language": "python", "code": code, "session_id": "ansi"})
	if env["success"] != true || data["stdout"] != plain.String() || outputs(data)[0]["text"] != plain.String() {
		t.Fatalf("v2 stdout %q, want %q", data["stdout"], plain.String())
	}
	r := ts.sdk(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": code, "session_id": "ansi"})
	if r.data()["stdout"] != plain.String() {
		t.Fatalf("v1 code stdout %q", r.data()["stdout"])
	}
	r = ts.sdk(t, "POST", "v1/jupyter/execute", map[string]any{"code": code, "session_id": "ansi"})
	if o := v1Outs(r.data()); len(o) == 0 || o[0]["text"] != plain.String() {
		t.Fatalf("v1 jupyter outputs %s", r.Raw)
	}
	// %pip's red error line, the issue's own example, in JavaScript too.
	_, _, data = ts.exec(t, map[string]any{"language": "javascript", "code": `console.error("\x1b[1;31merror\x1b[0m: no such package")`})
	if data["stderr"] != "error: no such package\n" {
		t.Fatalf("javascript stderr %q", data["stderr"])
	}

	// The WebSocket keeps the escapes, in its outputs and its result (the
	// page stores the result's outputs and colours them after a reload).
	c := dialWS(t, ts, nil)
	sendJSON(t, c, map[string]any{"type": "execute", "id": "a", "language": "python", "code": code, "session_id": "ansi"})
	msgs := readUntil(t, c, "result", "a", time.Minute)
	var live strings.Builder
	for _, m := range msgs {
		if m.typ() == "output" {
			live.WriteString(m.m["output"].(map[string]any)["text"].(string))
		}
	}
	if live.String() != raw.String() {
		t.Fatalf("WebSocket outputs %q, want the raw text", live.String())
	}
	if res := msgs[len(msgs)-1].m["data"].(map[string]any); res["stdout"] != raw.String() {
		t.Fatalf("WebSocket result stdout %q", res["stdout"])
	}
	// The Jupyter API passes the kernel's message through.
	k := dialKernel(t, ts, kernelOf(t, ts, "ansi"), false).live()
	go ts.exec(t, map[string]any{"language": "python", "code": code, "session_id": "ansi"})
	k.until(time.Minute, func(m *jupyter.Message) bool {
		return m.Header.MsgType == "stream" && strings.Contains(string(m.Content), `\u001b[31mred`)
	})
	k.until(time.Minute, func(m *jupyter.Message) bool { return m.Header.MsgType == "status" && state(m) == "idle" })
}

// Item 7: /v2/fs/read reads a line range, 1-based and inclusive, and the
// 413 for a file past the read limit points at it truthfully.
func TestV2ReadLineRanges(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	dir := ts.viewDir(t, "default")
	small := filepath.Join(dir, "five.txt")
	if err := os.WriteFile(ts.hostPath(t, "default", small), []byte("one\ntwo\nthree\nfour\nfive"), 0o644); err != nil {
		t.Fatal(err)
	}
	read := func(q string) (int, map[string]any) {
		t.Helper()
		st, env := ts.call(t, "GET", "/v2/fs/read?path="+small+q, nil)
		d, _ := env["data"].(map[string]any)
		if st != 200 {
			return st, env
		}
		return st, d
	}
	for q, want := range map[string]string{
		"&start_line=2&end_line=3": "two\nthree\n",
		"&start_line=4":            "four\nfive",
		"&end_line=1":              "one\n",
		"&start_line=5&end_line=9": "five",
		"":                         "one\ntwo\nthree\nfour\nfive",
	} {
		if st, d := read(q); st != 200 || d["content"] != want {
			t.Errorf("read %s: %d %v, want %q", q, st, d, want)
		}
	}
	st, env := ts.call(t, "POST", "/v2/fs/read", map[string]any{"path": small, "start_line": 2, "end_line": 2})
	if d, _ := env["data"].(map[string]any); st != 200 || d["content"] != "two\n" || d["line_count"] != float64(1) {
		t.Fatalf("POST read with a range: %d %v", st, env)
	}
	for q, field := range map[string]string{"&start_line=0": "'start_line'", "&end_line=0": "'end_line'", "&start_line=3&end_line=2": "'end_line'", "&start_line=x": "'start_line'"} {
		if st, env := read(q); st != 422 || !strings.Contains(env["message"].(string), field) {
			t.Errorf("read %s: %d %v, want a 422 naming %s", q, st, env, field)
		}
	}
	// Past the 64 MiB read limit: the 413 suggests a range, and the range works.
	big := filepath.Join(dir, "big.txt")
	line := strings.Repeat("x", 1023) + "\n"
	if err := os.WriteFile(ts.hostPath(t, "default", big), []byte("first\nsecond\n"+strings.Repeat(line, 65*1024)), 0o644); err != nil {
		t.Fatal(err)
	}
	st, env = ts.call(t, "GET", "/v2/fs/read?path="+big, nil)
	if msg, _ := env["message"].(string); st != 413 || !strings.Contains(msg, "start_line and end_line") {
		t.Fatalf("read of a 65 MiB file: %d %v", st, env)
	}
	st, env = ts.call(t, "GET", "/v2/fs/read?path="+big+"&start_line=2&end_line=3", nil)
	if d, _ := env["data"].(map[string]any); st != 200 || d["content"] != "second\n"+line {
		t.Fatalf("range of a 65 MiB file: %d %.300v", st, env)
	}
	// v1 keeps the SDK's 0-based, end-exclusive meaning.
	r := ts.sdk(t, "POST", "v1/file/read", map[string]any{"file": small, "start_line": 1, "end_line": 3})
	if r.data()["content"] != "two\nthree\n" {
		t.Fatalf("v1 read [1, 3): %s", r.Raw)
	}
}

// upload posts a multipart upload; fields are extra text parts.
func (ts *testServer) upload(t *testing.T, route, name string, content []byte, fields map[string]string) (int, map[string]any) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("file", name)
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(content)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	mw.Close()
	req, _ := http.NewRequest("POST", ts.URL+route, &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("upload answer is not JSON: %d %q", resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

// Item 8: an upload without a path lands in --workdir, where the code
// runs; an existing file is a 409 unless overwrite=true.
func TestUploadsLandInWorkdirAndDoNotOverwrite(t *testing.T) {
	t.Parallel()
	wd := t.TempDir()
	ts := startServer(t, Config{Workdir: wd})
	st, env := ts.upload(t, "/v2/fs/upload", "data.csv", []byte("a,b\n1,2\n"), nil)
	if st != 200 || env["data"].(map[string]any)["path"] != filepath.Join(wd, "data.csv") {
		t.Fatalf("upload without a path: %d %v", st, env)
	}
	// The code finds it by its bare name.
	if _, env, data := ts.exec(t, map[string]any{"language": "javascript", "code": "require('fs').readFileSync('data.csv', 'utf8')"}); !strings.Contains(mustJSONString(t, data["outputs"]), "1,2") {
		t.Fatalf("the runtime does not see the upload in its folder: %v", env)
	}
	st, env = ts.upload(t, "/v2/fs/upload", "data.csv", []byte("new\n"), nil)
	if msg, _ := env["message"].(string); st != 409 || !strings.Contains(msg, "overwrite=true") {
		t.Fatalf("second upload: %d %v", st, env)
	}
	if b, _ := os.ReadFile(ts.hostPath(t, "default", filepath.Join(wd, "data.csv"))); string(b) != "a,b\n1,2\n" {
		t.Fatalf("the refused upload changed the file: %q", b)
	}
	if st, env := ts.upload(t, "/v2/fs/upload", "data.csv", []byte("new\n"), map[string]string{"overwrite": "true"}); st != 200 {
		t.Fatalf("upload with overwrite=true: %d %v", st, env)
	}
	if b, _ := os.ReadFile(ts.hostPath(t, "default", filepath.Join(wd, "data.csv"))); string(b) != "new\n" {
		t.Fatalf("overwrite=true did not replace the file: %q", b)
	}
	// v1 (the SDK) lands in the same folder and replaces, as it did.
	st, env = ts.upload(t, "/v1/file/upload", "data.csv", []byte("v1\n"), nil)
	if d, _ := env["data"].(map[string]any); st != 200 || d["file_path"] != filepath.Join(wd, "data.csv") {
		t.Fatalf("v1 upload: %d %v", st, env)
	}
}

// Item 9: an interrupted execution says it was interrupted, and by what,
// without the dangling "KeyboardInterrupt: ".
func TestInterruptSaysWhoInterrupted(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	c := dialWS(t, ts, nil)
	// started waits for id's first output and returns its execution id.
	started := func(id any) string {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; {
			m := readJSON(t, c, time.Until(deadline))
			if m.typ() == "output" && m.id() == id {
				eid, _ := m.m["execution_id"].(string)
				return eid
			}
			if m.typ() == "result" || m.typ() == "error" {
				t.Fatalf("ended before it started: %v", m.m)
			}
		}
	}
	// result waits for id's result; when none comes, it fails naming the
	// case and every message seen since the interrupt. (A lost interrupt
	// shows as the result of the 120 s timeout, or of the sleep's end.)
	result := func(id any, name string) map[string]any {
		t.Helper()
		var seen []map[string]any
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("%s: no result 3 min after the interrupt (%v); messages since: %v", name, err, seen)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("%s: message is not JSON: %q", name, b)
			}
			seen = append(seen, m)
			if m["type"] == "result" && m["id"] == id {
				return m
			}
		}
	}
	cases := []struct {
		lang, code, via, want string
	}{
		{"python", "import time\nprint('started', flush=True)\ntime.sleep(60)", "ws", "execution was interrupted by a client (WebSocket interrupt)"},
		{"python", "import time\nprint('started', flush=True)\ntime.sleep(60)", "api", "execution was interrupted by a client (Jupyter API interrupt)"},
		{"javascript", "console.log('started'); while (true) {}", "ws", "execution was interrupted by a client (WebSocket interrupt)"},
		{"python", "import time\nprint('started', flush=True)\ntime.sleep(60)", "rest", "execution was interrupted by a client (REST session interrupt)"},
		{"python", "import time\nprint('started', flush=True)\ntime.sleep(60)", "execution", "execution was interrupted by a client (REST interrupt)"},
	}
	// Each text is the one docs/v2-contract.md gives.
	contract, err := os.ReadFile(filepath.Join("..", "docs", "v2-contract.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(contract)), " ")
	for _, tc := range cases {
		if label := tc.want[strings.Index(tc.want, "("):]; !strings.Contains(doc, "`"+label+"`") && !strings.Contains(doc, "client "+label) {
			t.Errorf("docs/v2-contract.md does not give the interrupt text %q", label)
		}
	}
	for i, tc := range cases {
		id := float64(i + 1)
		sid := "int-" + tc.lang
		sendJSON(t, c, map[string]any{"type": "execute", "id": id, "language": tc.lang, "code": tc.code, "session_id": sid, "timeout": 120})
		eid := started(id)
		if tc.via == "ws" {
			sendJSON(t, c, map[string]any{"type": "interrupt", "id": "i", "language": tc.lang, "session_id": sid})
		} else if tc.via == "rest" {
			if st, env := ts.call(t, "POST", "/v2/code/sessions/"+sid+"/interrupt", map[string]any{"language": tc.lang}); st != 200 {
				t.Fatalf("interrupt through REST: %d %v", st, env)
			}
		} else if tc.via == "execution" {
			if st, env := ts.call(t, "POST", "/v2/code/executions/"+eid+"/interrupt", nil); st != 200 || eid == "" {
				t.Fatalf("interrupt of execution %q through REST: %d %v", eid, st, env)
			}
		} else if st, b := httpDo(t, "POST", ts.URL+"/api/kernels/"+kernelOf(t, ts, sid)+"/interrupt", "", ""); st != 204 {
			t.Fatalf("interrupt through the Jupyter API: %d %s", st, b)
		}
		sigs := "" // the runtime's signal state, for a failure's message
		if sess := ts.reg.Get("default", tc.lang, sid); sess != nil && sess.Runtime() != nil {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", sess.Runtime().Info().PID))
			for _, l := range strings.Split(string(st), "\n") {
				if strings.HasPrefix(l, "Sig") || strings.HasPrefix(l, "Shd") || strings.HasPrefix(l, "Threads") {
					sigs += l + "; "
				}
			}
		}
		res := result(id, tc.lang+" via "+tc.via+" (runtime "+sigs+")")
		msg, _ := res["message"].(string)
		data := res["data"].(map[string]any)
		if res["success"] != false || data["status"] != "error" || !strings.HasPrefix(msg, tc.want) || strings.Contains(msg, "KeyboardInterrupt: ") {
			t.Fatalf("%s via %s: message %q, status %v; want it to start with %q; runtime %s", tc.lang, tc.via, msg, data["status"], tc.want, sigs)
		}
	}
	// The next call is not marked: the interrupt belonged to one execution.
	_, env, _ := ts.exec(t, map[string]any{"language": "python", "code": "raise KeyboardInterrupt", "session_id": "int-python"})
	if msg := env["message"].(string); msg != "execution raised KeyboardInterrupt" {
		t.Fatalf("a KeyboardInterrupt nobody sent: %q", msg)
	}
}

// Item 10: the README's /healthz row is what the daemon answers.
func TestHealthzMatchesREADME(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "| `GET /healthz` |") {
			row = l
		}
	}
	parts := strings.Split(row, "`")
	if len(parts) < 4 {
		t.Fatalf("no GET /healthz row with a JSON answer in the README: %q", row)
	}
	var want any
	if err := json.Unmarshal([]byte(parts[3]), &want); err != nil {
		t.Fatalf("README's /healthz answer %q is not JSON: %v", parts[3], err)
	}
	ts := startServer(t, Config{})
	st, body := ts.callRaw(t, "GET", "/healthz")
	var got any
	if err := json.Unmarshal([]byte(body), &got); err != nil || st != 200 || !reflect.DeepEqual(got, want) {
		t.Fatalf("/healthz answers %d %s; the README says %s", st, body, parts[3])
	}
}

// Item 10: /v1/sandbox lists each Python interpreter once.
func TestV1SandboxListsEachPythonOnce(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	r := ts.sdk(t, "GET", "v1/sandbox", nil)
	py, _ := r.Body["detail"].(map[string]any)["runtime"].(map[string]any)["python"].([]any)
	seen := map[string]bool{}
	for _, p := range py {
		bin, _ := p.(map[string]any)["bin"].(string)
		real, err := filepath.EvalSymlinks(bin)
		if err != nil {
			real = bin
		}
		if seen[real] {
			t.Fatalf("python %s listed twice: %v", bin, py)
		}
		seen[real] = true
	}
	if len(py) == 0 {
		t.Fatalf("no python listed: %s", r.Raw)
	}
}

// Item 3: a runtime that cannot start because its working folder is gone
// says so, instead of blaming the interpreter.
func TestRuntimeStartBlamesMissingWorkdir(t *testing.T) {
	t.Parallel()
	wd := filepath.Join(t.TempDir(), "work")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	// Without tenant isolation: a tenant's working folder is its own, in
	// the state directory, whatever becomes of --workdir on the host.
	ts := startServer(t, Config{Workdir: wd, Isolation: backend.Isolation{Isolation: "none"}})
	if err := os.Remove(wd); err != nil {
		t.Fatal(err)
	}
	st, env := ts.call(t, "POST", "/v2/code/execute", map[string]any{"language": "javascript", "code": "1"})
	msg, _ := env["message"].(string)
	if st != 503 || !strings.Contains(msg, `the working folder "`+wd+`" (--workdir) is unusable`) {
		t.Fatalf("start in a removed workdir: %d %q", st, msg)
	}
}

// Item 10: the walkthroughs run under a token with AIO_TOKEN set, and the
// v2 one writes margin.png into the current folder, as the README says.
func TestWalkthroughsWithToken(t *testing.T) {
	t.Parallel()
	const token = "walk-t0ken"
	ts := startServer(t, Config{Token: token})
	cwd := t.TempDir()
	kerneltest.LockWalkthrough(t)
	script, _ := filepath.Abs("../examples/walkthrough.py")
	cmd := exec.Command("/usr/bin/python3", script, ts.URL)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "AIO_TOKEN="+token)
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "\n404\n") {
		t.Fatalf("walkthrough under a token with AIO_TOKEN: %v\n%s", err, b)
	}
	if png, err := os.ReadFile(filepath.Join(cwd, "margin.png")); err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
		t.Fatalf("margin.png not written into the current folder (%v)", err)
	}
	v1 := exec.Command("/usr/bin/python3", "../examples/v1_sdk_walkthrough.py", ts.URL, t.TempDir())
	v1.Env = append(os.Environ(), "AIO_TOKEN="+token)
	if b, err := v1.CombinedOutput(); err != nil || !strings.Contains(string(b), "done\n") {
		t.Fatalf("v1 walkthrough under a token with AIO_TOKEN: %v\n%s", err, b)
	}
	// Without the token the guard still refuses: the test is not vacuous.
	bare := exec.Command("/usr/bin/python3", script, ts.URL, t.TempDir())
	bare.Env = os.Environ()
	for i, kv := range bare.Env {
		if strings.HasPrefix(kv, "AIO_TOKEN=") {
			bare.Env[i] = "AIO_TOKEN="
		}
	}
	if b, err := bare.CombinedOutput(); err == nil || !strings.Contains(string(b), "401") {
		t.Fatalf("walkthrough without a token: %v\n%s", err, b)
	}
}

// Issue 40, item 3: a shell escape whose command fails fails the cell, so
// a client checking success sees it ("%pip install" of a package that
// cannot be had answered success with pip's error inside). Capturing its
// output ("x = !cmd") and a command that succeeds are unchanged.
func TestFailingShellEscapesFailTheCell(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	for _, c := range []struct {
		code, ename, evalue, stdout string
	}{
		{"!exit 3", "CalledProcessError", "Command 'exit 3' returned non-zero exit status 3.", ""},
		{"%pip install --no-index --quiet no-such-package-for-aiod", "CalledProcessError", "-m pip install --no-index --quiet no-such-package-for-aiod' returned non-zero exit status 1.", ""},
		{"!echo fine", "", "", "fine\n"},
		{"x = !echo captured; false\nprint(x)", "", "", "['captured']\n"},
	} {
		_, env, data := ts.exec(t, map[string]any{"language": "python", "session_id": "escapes", "code": c.code, "timeout": 120})
		if c.ename == "" {
			if out, _ := data["stdout"].(string); env["success"] != true || strings.TrimSpace(out) != strings.TrimSpace(c.stdout) { // a pty's \r\n
				t.Fatalf("%q: %v", c.code, env)
			}
			continue
		}
		outs, _ := data["outputs"].([]any)
		var ename, evalue string
		for _, o := range outs {
			if m, _ := o.(map[string]any); m["output_type"] == "error" {
				ename, _ = m["ename"].(string)
				evalue, _ = m["evalue"].(string)
			}
		}
		if env["success"] != false || data["status"] != "error" || ename != c.ename || !strings.HasSuffix(evalue, c.evalue) {
			t.Fatalf("%q: success %v, status %v, error %s: %q; want %s ending %q\n%v", c.code, env["success"], data["status"], ename, evalue, c.ename, c.evalue, env)
		}
	}
}

// Issue 40, item 3: under tenant isolation a runtime has no network by
// default, and a call that fails on a name lookup says which setting that
// is and how to open it; a failure of another kind says nothing of it.
func TestNetworkFailureNamesTheSetting(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	if tr := ts.TenantIsolation(""); tr.Mode != "tenant" || tr.Network != "none" {
		t.Fatalf("the test server's isolation: %+v, want tenant with no network", tr)
	}
	for _, c := range []struct {
		lang, code string
		note       bool
	}{
		{"python", "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=20)", true},
		{"javascript", "await require('dns').promises.lookup('example.com')", true},
		{"python", "undefined_name", false},
	} {
		_, env, _ := ts.exec(t, map[string]any{"language": c.lang, "code": c.code, "timeout": 60})
		msg, _ := env["message"].(string)
		if env["success"] != false || strings.Contains(msg, "--runtime-network none") != c.note {
			t.Errorf("%s %q: success %v, message %q; want the network note: %v", c.lang, c.code, env["success"], msg, c.note)
		}
	}
}

// Issue 40, item 7: a huge print answers within the output budget plus a
// little, though the answer carries stream text twice (outputs, and the
// stdout digest): 400,000 lines answered 19 MB against an 8 MiB budget.
// Here 24 MB of output against 1 MiB, in REST v2 and v1.
func TestHugePrintAnswersWithinTheBudget(t *testing.T) {
	t.Parallel()
	const budget = 1 << 20
	ts := startServer(t, Config{OutputBudget: budget})
	code := "import sys\nline = 'y' * 99 + '\\n'\nfor i in range(240_000):\n    sys.stdout.write(line)\nprint('THE END')"
	for _, path := range []string{"/v2/code/execute", "/v1/code/execute"} {
		body, _ := json.Marshal(map[string]any{"language": "python", "code": code, "timeout": 120})
		req := ts.request(t, "POST", path, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(raw), "THE END") || !strings.Contains(string(raw), "output budget") {
			t.Fatalf("%s: %d, %d bytes, tail %q", path, resp.StatusCode, len(raw), raw[max(0, len(raw)-300):])
		}
		if limit := budget + budget/4; len(raw) > limit {
			t.Errorf("%s answered %d bytes for a %d-byte budget, want at most %d", path, len(raw), budget, limit)
		}
	}
}
