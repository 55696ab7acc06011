package gateway

import (
	"strings"
	"testing"
	"time"
)

// The snapshot and fork routes answer as the OpenAPI document says (every
// call here is validated against it), refuse bad input with a 422 naming
// the field, and list a saved session; a fork's answer and its session
// hold the state.
func TestSnapshotRoutes(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{KernelIdle: time.Second, ReapInterval: 200 * time.Millisecond})
	if st, env, data := ts.exec(t, map[string]any{"language": "python", "session_id": "snap", "code": "x = [1, 2]\ng = (i for i in x)"}); st != 200 || data["status"] != "ok" {
		t.Fatalf("exec: %d %v", st, env)
	}
	st, env := ts.call(t, "POST", "/v2/code/sessions/snap/snapshot", map[string]any{})
	data, _ := env["data"].(map[string]any)
	if st != 200 || data == nil || !strings.Contains(mustJSONString(t, data["saved"]), `"x"`) || data["skipped"].(map[string]any)["g"] == nil {
		t.Fatalf("snapshot: %d %v", st, env)
	}
	for _, c := range []struct {
		path  string
		body  any
		st    int
		field string
	}{
		{"/v2/code/sessions/snap/fork", map[string]any{}, 422, "session_id"},
		{"/v2/code/sessions/snap/fork", map[string]any{"session_id": "a b"}, 422, "session_id"},
		{"/v2/code/sessions/snap/fork", map[string]any{"session_id": 5}, 422, "session_id"},
		{"/v2/code/sessions/snap/snapshot", map[string]any{"language": "ruby"}, 422, "language"},
		{"/v2/code/sessions/snap/snapshot", map[string]any{"langauge": "python"}, 422, "langauge"},
		{"/v2/code/sessions/snap/snapshot", "[1]", 422, "body"},
		{"/v2/code/sessions/nope/snapshot", map[string]any{}, 404, ""},
		{"/v2/code/sessions/nope/fork", map[string]any{"session_id": "n2"}, 404, ""},
		{"/v2/code/sessions/snap/fork", map[string]any{"session_id": "snap"}, 409, ""},
	} {
		st, env := ts.call(t, "POST", c.path, c.body)
		if msg, _ := env["message"].(string); st != c.st || !strings.Contains(msg, c.field) {
			t.Errorf("POST %s %v: %d %v, want %d naming %q", c.path, c.body, st, env, c.st, c.field)
		}
	}
	st, env = ts.call(t, "POST", "/v2/code/sessions/snap/fork", map[string]any{"session_id": "snap2"})
	if data, _ := env["data"].(map[string]any); st != 200 || data["restored"] != true || data["forked_from"] != "snap" {
		t.Fatalf("fork: %d %v", st, env)
	}
	if _, _, data := ts.exec(t, map[string]any{"language": "python", "session_id": "snap2", "code": "print(x)"}); data["stdout"] != "[1, 2]\n" {
		t.Fatalf("the fork's state: %v", data)
	}
	// Reclaimed for idleness: listed as saved, restored on use.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, env := ts.call(t, "GET", "/v2/code/sessions", nil)
		if strings.Count(mustJSONString(t, env), `"state":"saved"`) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not saved: %v", env)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, env, data = ts.exec(t, map[string]any{"language": "python", "session_id": "snap", "code": "print(x)"})
	if st != 200 || data["restored"] != true || data["stdout"] != "[1, 2]\n" || !strings.Contains(env["message"].(string), "restored from snapshot") {
		t.Fatalf("after the reclaim: %d %v", st, env)
	}
}
