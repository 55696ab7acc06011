package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// language "bash" on the REST route: a session keeps cwd, variables and
// functions; a one-shot call keeps nothing; exit codes, stderr, timeouts
// and interrupts as for every language; /v2/code/info lists it.
func TestBashLanguageREST(t *testing.T) {
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
	if data["status"] != "timeout" || data["exit_code"] != 124.0 || time.Since(start) > 15*time.Second {
		t.Fatalf("timeout: %v after %s", env, time.Since(start))
	}
	if _, _, data = ts.exec(t, map[string]any{"language": "bash", "session_id": "sh", "code": "f"}); data["stdout"] != "42\n" {
		t.Fatalf("state after the timeout: %v", data)
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
