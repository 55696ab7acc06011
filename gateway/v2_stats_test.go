package gateway

import (
	"testing"

	"github.com/aiod/aiod/stream/backend"
)

// TestSessionStats: GET /v2/code/sessions/{id}/stats reads the session's
// runtime's cgroup (issue 42): memory that grows with what the code holds,
// its limit, processes, CPU; an unknown session is 404, and one in two
// languages wants ?language=.
func TestSessionStats(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Isolation: backend.Isolation{MemoryBytes: 1 << 30, Pids: 256}})
	if st, env, _ := ts.exec(t, map[string]any{"language": "python", "session_id": "st", "code": "x = bytearray(64 << 20)\nimport time\nt0 = time.process_time()\nwhile time.process_time() - t0 < 0.3: pass"}); st != 200 || env["success"] != true {
		t.Fatalf("exec: %d %v", st, env)
	}
	st, env := ts.call(t, "GET", "/v2/code/sessions/st/stats", nil)
	d, _ := env["data"].(map[string]any)
	if st != 200 || d["runtime"] != true || d["source"] != "cgroup" || d["language"] != "python" {
		t.Fatalf("stats: %d %v", st, env)
	}
	mem, _ := d["memory_bytes"].(float64)
	lim, _ := d["memory_limit_bytes"].(float64)
	cpu, _ := d["cpu_seconds"].(float64)
	pids, _ := d["pids"].(float64)
	if mem < 64<<20 || lim != 1<<30 || cpu < 0.3 || pids < 1 || d["pids_limit"] != 256.0 || d["pid"].(float64) <= 0 {
		t.Errorf("memory %v (limit %v), cpu %v s, pids %v (limit %v): want the 64 MiB, the 1 GiB limit, the 0.3 s loop and a process under 256", mem, lim, cpu, pids, d["pids_limit"])
	}
	if st, _ := ts.call(t, "GET", "/v2/code/sessions/nope/stats", nil); st != 404 {
		t.Errorf("unknown session: %d", st)
	}
	ts.exec(t, map[string]any{"language": "javascript", "session_id": "st", "code": "1"})
	if st, env := ts.call(t, "GET", "/v2/code/sessions/st/stats", nil); st != 409 {
		t.Errorf("an id in two languages without ?language=: %d %v", st, env)
	}
	if st, env := ts.call(t, "GET", "/v2/code/sessions/st/stats?language=javascript", nil); st != 200 || env["data"].(map[string]any)["language"] != "javascript" {
		t.Errorf("?language=javascript: %d %v", st, env)
	}
}
