package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// The agent_sandbox SDK's shell client (client.shell.*), each call sent as
// the SDK sends it (arguments not given are left out), each answer checked
// against the models in openapi.json: state across calls, exit codes,
// stderr, async_mode with view and wait, write answering read, kill of
// sleep 100, hard and no-change timeouts, sessions in an exec_dir, listed
// and closed, terminal-url serving the page.
func TestV1ShellSDK(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	dir := ts.viewDir(t, "")

	// exec_command without id: a session is made; its state survives.
	r := ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"command": "cd " + dir + " && export DEMO=hello && greet() { echo \"$1 $DEMO\"; }"})
	sid, _ := r.data()["session_id"].(string)
	if sid == "" || r.data()["status"] != "completed" || r.data()["exit_code"] != 0.0 {
		t.Fatalf("first exec: %s", r.Raw)
	}
	r = ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"id": sid, "command": "pwd; greet hi; echo problem >&2; false"})
	if out := r.data()["output"]; out != dir+"\nhi hello\nproblem\n" || r.data()["exit_code"] != 1.0 || r.data()["status"] != "completed" {
		t.Fatalf("state, stderr and exit code: %s", r.Raw)
	}
	if con, _ := r.data()["console"].([]any); len(con) != 1 {
		t.Fatalf("console: %s", r.Raw)
	}

	// async_mode, then wait and view.
	r = ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"id": sid, "command": "echo start; sleep 1; echo end", "async_mode": true})
	if r.data()["status"] != "running" || r.data()["exit_code"] != nil {
		t.Fatalf("async: %s", r.Raw)
	}
	busy := ts.sdkStatus(t, "POST", "v1/shell/exec", map[string]any{"id": sid, "command": "true"}, http.StatusConflict)
	if busy.Body["success"] != false {
		t.Fatalf("busy session: %s", busy.Raw)
	}
	w := ts.sdkOK(t, "POST", "v1/shell/wait", map[string]any{"id": sid, "seconds": 30})
	if w.data()["status"] != "completed" {
		t.Fatalf("wait: %s", w.Raw)
	}
	v := ts.sdkOK(t, "POST", "v1/shell/view", map[string]any{"id": sid})
	if v.data()["output"] != "start\nend\n" || v.data()["exit_code"] != 0.0 || v.data()["command"] != "echo start; sleep 1; echo end" {
		t.Fatalf("view: %s", v.Raw)
	}

	// write answers a read.
	// Written at once: the input waits until the shell has read the command.
	ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"id": sid, "command": "read -r -p 'name? ' who; echo \"hello $who\"", "async_mode": true})
	ts.sdkOK(t, "POST", "v1/shell/write", map[string]any{"id": sid, "input": "world", "press_enter": true})
	ts.sdkOK(t, "POST", "v1/shell/wait", map[string]any{"id": sid, "seconds": 10})
	if v = ts.sdkOK(t, "POST", "v1/shell/view", map[string]any{"id": sid}); !strings.HasSuffix(v.data()["output"].(string), "hello world\n") {
		t.Fatalf("write then view: %s", v.Raw)
	}
	ts.sdkStatus(t, "POST", "v1/shell/write", map[string]any{"id": sid, "input": "ls", "press_enter": true}, http.StatusConflict)

	// kill ends sleep 100 (terminated, 130); the session goes on.
	// Killed at once: the interrupt waits until the shell has read the
	// command (one at its prompt would be lost and the command would run).
	ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"id": sid, "command": "sleep 100; echo not-reached", "async_mode": true})
	start := time.Now()
	k := ts.sdkOK(t, "POST", "v1/shell/kill", map[string]any{"id": sid})
	if took := time.Since(start); k.data()["status"] != "terminated" || k.data()["exit_code"] != 130.0 {
		t.Fatalf("kill after %s: %s", took, k.Raw)
	}
	if r = ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"id": sid, "command": "greet again"}); r.data()["output"] != "again hello\n" {
		t.Fatalf("after kill: %s", r.Raw)
	}

	// timeout answers running; hard_timeout stops; no_change_timeout answers while the command goes on.
	r = ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"id": sid, "command": "sleep 2; echo slow", "timeout": 0.5})
	if r.data()["status"] != "running" {
		t.Fatalf("timeout: %s", r.Raw)
	}
	ts.sdkOK(t, "POST", "v1/shell/wait", map[string]any{"id": sid, "seconds": 10})
	start = time.Now()
	r = ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"id": sid, "command": "echo begun; sleep 100", "hard_timeout": 1})
	if r.data()["status"] != "hard_timeout" || !strings.HasPrefix(r.data()["output"].(string), "begun\n") {
		t.Fatalf("hard_timeout after %s: %s", time.Since(start), r.Raw)
	}
	start = time.Now()
	r = ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"id": sid, "command": "echo tick; sleep 5; echo tock", "no_change_timeout": 1})
	if r.data()["status"] != "no_change_timeout" || r.data()["output"] != "tick\n" {
		t.Fatalf("no_change_timeout after %s: %s", time.Since(start), r.Raw)
	}
	ts.sdkOK(t, "POST", "v1/shell/kill", map[string]any{"id": sid})

	// sessions: create in an exec_dir, update, list, stats, close.
	sub := filepath.Join(dir, "work")
	if view, err := ts.core.View(""); err != nil || view.MkdirAll(sub, 0o755) != nil {
		t.Fatalf("mkdir %s: %v", sub, err)
	}
	c := ts.sdkOK(t, "POST", "v1/shell/sessions/create", map[string]any{"id": "sdk-shell", "exec_dir": sub})
	if c.data()["session_id"] != "sdk-shell" || c.data()["working_dir"] != sub {
		t.Fatalf("create_session: %s", c.Raw)
	}
	if k := ts.sdkOK(t, "POST", "v1/shell/kill", map[string]any{"id": "sdk-shell"}); k.data()["status"] != "completed" {
		t.Fatalf("kill with nothing running: %s", k.Raw)
	}
	if r = ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"id": "sdk-shell", "command": "pwd"}); r.data()["output"] != sub+"\n" {
		t.Fatalf("session in exec_dir: %s", r.Raw)
	}
	ts.sdkOK(t, "POST", "v1/shell/sessions/update", map[string]any{"id": "sdk-shell", "no_change_timeout": 30})
	l := ts.sdkOK(t, "GET", "v1/shell/sessions", nil)
	sessions, _ := l.data()["sessions"].(map[string]any)
	if sessions["sdk-shell"] == nil || sessions[sid] == nil {
		t.Fatalf("list_sessions: %s", l.Raw)
	}
	if st := ts.sdkOK(t, "GET", "v1/shell/sessions/stats", nil); st.data()["total_sessions"] != 2.0 {
		t.Fatalf("stats: %s", st.Raw)
	}
	ts.sdkOK(t, "DELETE", "v1/shell/sessions/sdk-shell", nil)
	ts.sdkStatus(t, "POST", "v1/shell/view", map[string]any{"id": "sdk-shell"}, http.StatusNotFound)
	ts.sdkOK(t, "DELETE", "v1/shell/sessions", nil)
	if l = ts.sdkOK(t, "GET", "v1/shell/sessions", nil); len(l.data()["sessions"].(map[string]any)) != 0 {
		t.Fatalf("after cleanup_all_sessions: %s", l.Raw)
	}

	// Bad input names the field.
	ts.sdk422(t, "POST", "v1/shell/exec", map[string]any{"command": "pwd", "exec_dir": "/no/such/dir", "strict": true}, "body", "exec_dir")
	ts.sdk422(t, "POST", "v1/shell/exec", map[string]any{"command": "pwd", "exec_dir": "relative"}, "body", "exec_dir")
	ts.sdk422(t, "POST", "v1/shell/exec", map[string]any{}, "body", "command")
	ts.sdk422(t, "POST", "v1/shell/exec", map[string]any{"command": "pwd", "hard_timeout": -1}, "body", "hard_timeout")
	if r = ts.sdkOK(t, "POST", "v1/shell/exec", map[string]any{"command": "pwd", "exec_dir": "/no/such/dir"}); r.data()["status"] != "completed" {
		t.Fatalf("non-strict missing exec_dir: %s", r.Raw)
	}

	// terminal-url points at the page, which serves.
	u := ts.sdkOK(t, "GET", "v1/shell/terminal-url", nil)
	url, _ := u.Body["data"].(string)
	if !strings.HasPrefix(url, ts.URL+"/") {
		t.Fatalf("terminal-url: %s", u.Raw)
	}
	resp, err := ts.client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("terminal page: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// The SDK's bash client (client.bash.*): a bash per command (cd and
// export do not last), the session's exec_dir, per-command env, exit
// codes, async_mode with output by offset (every byte once), wait,
// write, kill by signal name, hard_timeout, head-and-tail truncation,
// sessions created, listed and closed.
func TestV1BashSDK(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	dir := ts.viewDir(t, "")

	r := ts.sdkOK(t, "POST", "v1/bash/exec", map[string]any{"command": `printf "out\n" && printf "err\n" >&2; cd /; export X=1; exit 3`,
		"exec_dir": dir, "timeout": 30, "hard_timeout": 120})
	d := r.data()
	sid, _ := d["session_id"].(string)
	if sid == "" || d["command_id"] == "" || d["status"] != "completed" || d["stdout"] != "out\n" || d["stderr"] != "err\n" ||
		d["exit_code"] != 3.0 || d["offset"] != 4.0 || d["stderr_offset"] != 4.0 {
		t.Fatalf("exec: %s", r.Raw)
	}
	r = ts.sdkOK(t, "POST", "v1/bash/exec", map[string]any{"session_id": sid, "command": "pwd; echo ${X:-unset} $MY_VAR", "env": map[string]string{"MY_VAR": "mine"}})
	if r.data()["stdout"] != dir+"\nunset mine\n" || r.data()["stderr"] != nil || r.data()["exit_code"] != 0.0 {
		t.Fatalf("session state: %s", r.Raw)
	}
	ts.sdk422(t, "POST", "v1/bash/exec", map[string]any{"session_id": sid, "command": "env", "env": map[string]string{"AIO_TOKEN": "x"}}, "body", "env")
	ts.sdk422(t, "POST", "v1/bash/exec", map[string]any{"command": "pwd", "exec_dir": "/no/such/dir"}, "body", "exec_dir")

	// async_mode: read by offset, long-polling; no byte twice, none lost.
	r = ts.sdkOK(t, "POST", "v1/bash/exec", map[string]any{"session_id": sid, "async_mode": true,
		"command": "for i in 1 2 3 4 5; do echo line$i; echo e$i >&2; sleep 0.2; done"})
	if r.data()["status"] != "running" {
		t.Fatalf("async exec: %s", r.Raw)
	}
	cid := r.data()["command_id"].(string)
	var stdout, stderr string
	off, eoff := 0.0, 0.0
	for i := 0; ; i++ {
		o := ts.sdkOK(t, "POST", "v1/bash/output", map[string]any{"session_id": sid, "offset": off, "stderr_offset": eoff, "wait": true, "wait_timeout": 10})
		stdout += o.data()["stdout"].(string)
		stderr += o.data()["stderr"].(string)
		off, eoff = o.data()["offset"].(float64), o.data()["stderr_offset"].(float64)
		cmd := o.data()["command"].(map[string]any)
		if cmd["command_id"] != cid {
			t.Fatalf("output names command %v, want %s", cmd["command_id"], cid)
		}
		if cmd["status"] == "completed" {
			if cmd["exit_code"] != 0.0 {
				t.Fatalf("async command: %s", o.Raw)
			}
			break
		}
		if i > 50 {
			t.Fatal("async command never completed")
		}
	}
	if stdout != "line1\nline2\nline3\nline4\nline5\n" || stderr != "e1\ne2\ne3\ne4\ne5\n" {
		t.Fatalf("read by offset: stdout %q stderr %q", stdout, stderr)
	}
	o := ts.sdkOK(t, "POST", "v1/bash/output", map[string]any{"session_id": sid, "command_id": cid, "offset": 6})
	if o.data()["stdout"] != "line2\nline3\nline4\nline5\n" {
		t.Fatalf("output from offset 6: %s", o.Raw)
	}

	// write to a command's stdin.
	ts.sdkOK(t, "POST", "v1/bash/exec", map[string]any{"session_id": sid, "command": "cat", "async_mode": true, "hard_timeout": 120})
	ts.sdkOK(t, "POST", "v1/bash/write", map[string]any{"session_id": sid, "input": "hello from stdin\n"})
	o = ts.sdkOK(t, "POST", "v1/bash/output", map[string]any{"session_id": sid, "offset": 0, "wait": true, "wait_timeout": 10})
	if o.data()["stdout"] != "hello from stdin\n" {
		t.Fatalf("cat after write: %s", o.Raw)
	}
	// kill by signal name.
	start := time.Now()
	k := ts.sdkOK(t, "POST", "v1/bash/kill", map[string]any{"session_id": sid, "signal": "SIGTERM"})
	if took := time.Since(start); k.data()["status"] != "killed" {
		t.Fatalf("kill after %s: %s", took, k.Raw)
	}
	ts.sdk422(t, "POST", "v1/bash/kill", map[string]any{"session_id": sid, "signal": "SIGNOPE"}, "body", "signal")
	ts.sdkStatus(t, "POST", "v1/bash/write", map[string]any{"session_id": sid, "input": "x"}, http.StatusConflict)

	// hard_timeout kills: timed_out.
	start = time.Now()
	r = ts.sdkOK(t, "POST", "v1/bash/exec", map[string]any{"session_id": sid, "command": "echo begun; sleep 100", "hard_timeout": 1})
	if r.data()["status"] != "timed_out" || r.data()["stdout"] != "begun\n" {
		t.Fatalf("hard_timeout after %s: %s", time.Since(start), r.Raw)
	}
	// timeout: running, and the command goes on.
	r = ts.sdkOK(t, "POST", "v1/bash/exec", map[string]any{"session_id": sid, "command": "sleep 1; echo done", "timeout": 0.2})
	if r.data()["status"] != "running" {
		t.Fatalf("timeout: %s", r.Raw)
	}
	o = ts.sdkOK(t, "POST", "v1/bash/output", map[string]any{"session_id": sid, "wait": true, "wait_timeout": 10})
	if o.data()["stdout"] != "done\n" {
		t.Fatalf("after timeout: %s", o.Raw)
	}
	// max_output_length keeps the head and the tail.
	r = ts.sdkOK(t, "POST", "v1/bash/exec", map[string]any{"session_id": sid, "command": "printf 'HEAD'; head -c 100000 /dev/zero | tr '\\0' x; printf 'TAIL'", "max_output_length": 1000})
	if out := r.data()["stdout"].(string); len(out) > 1000 || !strings.HasPrefix(out, "HEAD") || !strings.HasSuffix(out, "TAIL") || !strings.Contains(out, "truncated") || r.data()["offset"] != 100008.0 {
		t.Fatalf("max_output_length: %.200s... offset %v", out, r.data()["offset"])
	}

	// sessions.
	c := ts.sdkOK(t, "POST", "v1/bash/sessions/create", map[string]any{"session_id": "sdk-bash", "exec_dir": dir})
	if c.data()["session_id"] != "sdk-bash" || c.data()["working_dir"] != dir || c.data()["status"] != "ready" {
		t.Fatalf("create_session: %s", c.Raw)
	}
	ts.sdkStatus(t, "POST", "v1/bash/sessions/create", map[string]any{"session_id": "sdk-bash"}, http.StatusConflict)
	l := ts.sdk(t, "GET", "v1/bash/sessions", nil)
	list, _ := l.Body["data"].([]any)
	if l.Status != 200 || len(list) != 2 {
		t.Fatalf("sessions: %s", l.Raw)
	}
	ts.sdkOK(t, "POST", "v1/bash/sessions/sdk-bash/close", nil)
	ts.sdkStatus(t, "POST", "v1/bash/output", map[string]any{"session_id": "sdk-bash"}, http.StatusNotFound)
}

// Three bash commands run at once, each in a bash of its own: each one
// marks a shared folder and waits until all three have, which only ends
// (within its 60 s) when none waits for another to finish.
func TestV1BashConcurrent(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	const meet = `d=/tmp/meet; mkdir -p $d; touch $d/$$; ` +
		`for i in $(seq 1200); do [ $(ls $d | wc -l) -ge 3 ] && break; sleep 0.05; done; ls $d | wc -l`
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := ts.sdkOK(t, "POST", "v1/bash/exec", map[string]any{"command": meet})
			if r.data()["stdout"] != "3\n" {
				t.Errorf("concurrent: %s", r.Raw)
			}
		}()
	}
	wg.Wait()
}

// The TypeScript SDK's shell client, as its fetcher sends each call, from
// Node; every answer is checked against openapi.json here.
func TestV1ShellTypeScriptSDK(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "node", "testdata/shell/ts_shell_client.mjs", ts.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var res struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
		Log   []struct {
			Method, Path, Body string
			Status             int
		} `json:"log"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("node output: %v\n%s", err, out)
	}
	if !res.OK {
		t.Fatalf("the TypeScript client failed: %s", res.Error)
	}
	for _, e := range res.Log {
		if err := openapiDoc(t).CheckBody(e.Method, e.Path, e.Status, []byte(e.Body)); err != nil {
			t.Errorf("%s %s: %v\n%s", e.Method, e.Path, err, e.Body)
		}
	}
	if len(res.Log) < 12 {
		t.Fatalf("only %d calls made", len(res.Log))
	}
}

// /v1/shell/exec with Accept: text/event-stream: output events as the
// command writes, then the result. By cause, not by time: after its first
// line the command waits for a file that the test makes when that line's
// event arrives; a stream held back until the command ended would never
// deliver it, and the command would give up after 60 s and say so.
func TestV1ShellSSE(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	gate, hostGate := streamGate(t, ts, "default")
	cmd := fmt.Sprintf("echo line1; for i in $(seq 600); do [ -e %[1]s ] && break; sleep 0.1; done; [ -e %[1]s ] || echo no-gate; echo line2; echo line3", gate)
	body, _ := json.Marshal(map[string]any{"command": cmd})
	req, _ := http.NewRequest("POST", ts.URL+"/v1/shell/exec", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var outputs []string
	var result map[string]any
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var m map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
			if event == "output" {
				outputs = append(outputs, m["output"].(string))
				openGate(t, hostGate)
			} else {
				result = m
			}
		}
	}
	if strings.Join(outputs, "") != "line1\nline2\nline3\n" || len(outputs) < 2 {
		t.Fatalf("outputs %q", outputs)
	}
	if result == nil || result["status"] != "completed" || result["exit_code"] != 0.0 || result["output"] != "line1\nline2\nline3\n" {
		t.Fatalf("result %v", result)
	}
	if err := openapiDoc(t).CheckBody("POST", "/v1/shell/exec", 200, mustMarshal(t, map[string]any{"success": true, "message": "ok", "data": result})); err != nil {
		t.Fatalf("the result event's data is no ShellCommandResult: %v", err)
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
