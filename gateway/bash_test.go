package gateway

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// language "bash" on the REST route: a session keeps cwd, variables and
// functions; a one-shot call keeps nothing; exit codes, stderr, timeouts
// and interrupts as for every language; /v2/code/info lists it.
func TestBashLanguageREST(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	_, env, data := ts.exec(t, map[string]any{"language": "bash", "session_id": "sh",
		"code": "mkdir -p sub && cd sub && export N=41 && f() { echo $((N + 1)); }"})
	if env["success"] != true || data["exit_code"] != 0.0 {
		t.Fatalf("first call: %v", env)
	}
	_, env, data = ts.exec(t, map[string]any{"language": "bash", "session_id": "sh", "code": "basename $PWD; f; echo oops >&2; ls /no-such-aiod"})
	if data["stdout"] != "sub\n42\n" || !strings.HasPrefix(data["stderr"].(string), "oops\n") || data["exit_code"] != 2.0 ||
		data["status"] != "error" || env["success"] != false || !strings.Contains(env["message"].(string), "exited with code 2") {
		t.Fatalf("second call: %v", env)
	}
	_, _, data = ts.exec(t, map[string]any{"language": "bash", "code": "echo ${N:-unset}"})
	if data["stdout"] != "unset\n" || data["session_id"] != nil {
		t.Fatalf("one-shot saw the session's state: %v", data)
	}
	start := time.Now()
	_, env, data = ts.exec(t, map[string]any{"language": "bash", "session_id": "sh", "code": "sleep 100; echo late", "timeout": 1})
	if data["status"] != "timeout" || data["exit_code"] != 124.0 {
		t.Fatalf("timeout: %v after %s", env, time.Since(start))
	}
	if _, _, data = ts.exec(t, map[string]any{"language": "bash", "session_id": "sh", "code": "f"}); data["stdout"] != "42\n" {
		t.Fatalf("state after the timeout: %v", data)
	}
	// Completion and inspection answer nothing for bash, without failing.
	if st, env := ts.call(t, "POST", "/v2/code/complete", map[string]any{"language": "bash", "session_id": "sh", "code": "ec", "cursor_pos": 2}); st != 200 || env["success"] != true {
		t.Fatalf("complete: %d %v", st, env)
	}
	if st, env := ts.call(t, "POST", "/v2/code/inspect", map[string]any{"language": "bash", "session_id": "sh", "code": "echo", "cursor_pos": 2}); st != 200 || env["success"] != true {
		t.Fatalf("inspect: %d %v", st, env)
	}
	_, info := ts.call(t, "GET", "/v2/code/info", nil)
	raw, _ := json.Marshal(info)
	if !strings.Contains(string(raw), `"language":"bash"`) {
		t.Fatalf("info lacks bash: %s", raw)
	}
	st, env := ts.call(t, "POST", "/v2/code/execute", map[string]any{"language": "zsh", "code": "1"})
	if st != 422 || !strings.Contains(env["message"].(string), "bash") {
		t.Fatalf("unknown language: %d %v", st, env)
	}
}

// language "bash" on the WebSocket and on MCP's execute_code.
func TestBashLanguageWSAndMCP(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	c := dialWS(t, ts, nil)
	sendJSON(t, c, map[string]any{"type": "execute", "id": "a", "language": "bash", "session_id": "wsh", "code": "v=7"})
	readUntil(t, c, "result", "a", time.Minute)
	sendJSON(t, c, map[string]any{"type": "execute", "id": "b", "language": "bash", "session_id": "wsh", "code": "for i in 1 2; do echo $((v * i)); sleep 0.2; done"})
	var outs []string
	var res wsMsg
	for _, m := range readUntil(t, c, "result", "b", time.Minute) {
		if m.typ() == "output" {
			outs = append(outs, m.m["output"].(map[string]any)["text"].(string))
		}
		res = m
	}
	if strings.Join(outs, "") != "7\n14\n" || res.m["data"].(map[string]any)["exit_code"] != 0.0 {
		t.Fatalf("ws: outputs %q result %v", outs, res.m)
	}

	cs := mcpClient(t, ts, "", nil)
	if r := callTool(t, cs, "execute_code", map[string]any{"language": "bash", "code": "x=hello", "session_id": "msh"}, nil); r.IsError {
		t.Fatalf("mcp: %s", texts(r))
	}
	if r := callTool(t, cs, "execute_code", map[string]any{"language": "bash", "code": "echo $x from bash", "session_id": "msh"}, nil); r.IsError || texts(r) != "hello from bash\n" {
		t.Fatalf("mcp state: %v %q", r.IsError, texts(r))
	}
	if r := callTool(t, cs, "execute_code", map[string]any{"language": "bash", "code": "exit_status() { return 3; }; exit_status"}, nil); !r.IsError {
		t.Fatalf("mcp: exit code 3 is not an error: %q", texts(r))
	}
}

// env and cwd on /v2/code/execute: applied when a Python, JavaScript or
// bash session starts (bash: env per execution, put back after it); one-
// shot calls get both; AIO_* variables and missing folders are 422s.
func TestExecuteEnvAndCwd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	dir := ts.viewDir(t, "")
	env := map[string]any{"GREETING": "hello", "EMPTY": ""}
	probe := map[string]string{
		"python":     "import os; print(os.getcwd(), os.environ['GREETING'], repr(os.environ['EMPTY']))",
		"javascript": "console.log(process.cwd(), process.env.GREETING, JSON.stringify(process.env.EMPTY))",
		"bash":       `echo "$PWD" "$GREETING" "'$EMPTY'"`,
	}
	want := map[string]string{"python": dir + " hello ''\n", "javascript": dir + ` hello ""` + "\n", "bash": dir + " hello ''\n"}
	for _, lang := range []string{"python", "javascript", "bash"} {
		// One-shot.
		_, env1, data := ts.exec(t, map[string]any{"language": lang, "code": probe[lang], "cwd": dir, "env": env})
		if data["stdout"] != want[lang] {
			t.Errorf("%s one-shot: %v", lang, env1)
		}
		// A session created with them keeps them.
		sid := "envcwd-" + lang
		_, env1, data = ts.exec(t, map[string]any{"language": lang, "session_id": sid, "code": probe[lang], "cwd": dir, "env": env})
		if data["stdout"] != want[lang] {
			t.Errorf("%s session: %v", lang, env1)
		}
		if lang != "bash" {
			_, env1, data = ts.exec(t, map[string]any{"language": lang, "session_id": sid, "code": probe[lang]})
			if data["stdout"] != want[lang] {
				t.Errorf("%s session, second call: %v", lang, env1)
			}
		}
	}
	// bash: env is this execution's; the session's own variables are put back.
	ts.exec(t, map[string]any{"language": "bash", "session_id": "envcwd-bash", "code": "export GREETING=mine"})
	_, _, data := ts.exec(t, map[string]any{"language": "bash", "session_id": "envcwd-bash", "code": "echo $GREETING; false", "env": map[string]any{"GREETING": "once"}})
	if data["stdout"] != "once\n" || data["exit_code"] != 1.0 || data["code"] != "echo $GREETING; false" {
		t.Errorf("bash env for one execution: %v", data)
	}
	if _, _, data = ts.exec(t, map[string]any{"language": "bash", "session_id": "envcwd-bash", "code": "echo $GREETING"}); data["stdout"] != "mine\n" {
		t.Errorf("bash env not put back: %v", data)
	}
	// A Python session that runs already says env was not applied.
	_, env1, _ := ts.exec(t, map[string]any{"language": "python", "session_id": "envcwd-python", "code": "1", "env": env})
	if w, _ := json.Marshal(env1); !strings.Contains(string(w), "env was not applied") {
		t.Errorf("no warning for env on a running session: %s", w)
	}
	for _, bad := range []map[string]any{
		{"language": "python", "code": "1", "env": map[string]any{"AIO_TOKEN": "x"}},
		{"language": "bash", "code": "1", "env": map[string]any{"aio_jwt": "x"}},
		{"language": "bash", "code": "1", "env": map[string]any{"1BAD": "x"}},
		{"language": "javascript", "code": "1", "env": []string{"A=1"}},
	} {
		if st, env1 := ts.call(t, "POST", "/v2/code/execute", bad); st != 422 || !strings.Contains(env1["message"].(string), "'env'") {
			t.Errorf("%v: %d %v", bad["env"], st, env1)
		}
	}
	if st, env1 := ts.call(t, "POST", "/v2/code/execute", map[string]any{"language": "python", "code": "1", "cwd": "/no/such/folder"}); st != 422 || !strings.Contains(env1["message"].(string), "'cwd'") {
		t.Errorf("missing cwd: %d %v", st, env1)
	}
}

// env and cwd on the WebSocket's execute message and MCP's execute_code.
func TestEnvAndCwdWSAndMCP(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	dir := ts.viewDir(t, "")
	c := dialWS(t, ts, nil)
	sendJSON(t, c, map[string]any{"type": "execute", "id": "e", "language": "python", "session_id": "ws-env",
		"code": "import os; print(os.getcwd(), os.environ['WS_VAR'])", "cwd": dir, "env": map[string]string{"WS_VAR": "ws"}})
	msgs := readUntil(t, c, "result", "e", time.Minute)
	res := msgs[len(msgs)-1].m["data"].(map[string]any)
	if res["stdout"] != dir+" ws\n" {
		t.Fatalf("ws: %v", res)
	}
	sendJSON(t, c, map[string]any{"type": "execute", "id": "bad", "language": "python", "code": "1", "env": map[string]string{"AIO_X": "1"}})
	if m := readSkipAccepted(t, c, time.Minute); m.typ() != "error" || !strings.Contains(fmt.Sprint(m.m), "AIO_") {
		t.Fatalf("ws AIO_*: %v", m.m)
	}
	cs := mcpClient(t, ts, "", nil)
	r := callTool(t, cs, "execute_code", map[string]any{"language": "javascript", "code": "console.log(process.cwd(), process.env.MCP_VAR)", "cwd": dir, "env": map[string]string{"MCP_VAR": "mcp"}}, nil)
	if r.IsError || texts(r) != dir+" mcp\n" {
		t.Fatalf("mcp: %v %q", r.IsError, texts(r))
	}
	if r := callTool(t, cs, "execute_code", map[string]any{"language": "bash", "code": "pwd", "cwd": "/no/such/folder"}, nil); !r.IsError || !strings.Contains(texts(r), "cwd") {
		t.Fatalf("mcp missing cwd: %v %q", r.IsError, texts(r))
	}
}

// Two calls at once on one session, each with its own cwd, run each in its
// own folder, fifteen rounds over (the change of folder and the code were
// two turns of the session's queue, and another call's change could come
// between them).
func TestConcurrentCwdCallsKeepTheirFolders(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	dirs := []string{ts.viewDir(t, ""), ts.viewDir(t, "")}
	probe := map[string]string{"python": "import os; print(os.getcwd())", "bash": `echo "$PWD"`}
	for _, lang := range []string{"python", "bash"} {
		sid := "cwd-race-" + lang
		ts.exec(t, map[string]any{"language": lang, "session_id": sid, "code": probe[lang]})
		for round := range 15 {
			var wg sync.WaitGroup
			for _, dir := range dirs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, env, data := ts.exec(t, map[string]any{"language": lang, "session_id": sid, "code": probe[lang], "cwd": dir})
					if data["stdout"] != dir+"\n" {
						t.Errorf("%s round %d: asked for %s, ran in %v (%v)", lang, round, dir, data["stdout"], env["message"])
					}
				}()
			}
			wg.Wait()
		}
	}
}
