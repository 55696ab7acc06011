package gateway

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/backend/isolate"
)

// observers starts a gateway with runtime limits that tells callers apart
// by JWT, and returns the callers alice and bob.
func observers(t *testing.T, iso backend.Isolation) (alice, bob *testServer) {
	t.Helper()
	key := testRSAKey()
	ts := startServer(t, Config{JWTPublicKey: pemOf(t, &key.PublicKey), Isolation: iso})
	exp := time.Now().Add(time.Hour).Unix()
	a, b := *ts, *ts
	a.token = signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": "alice", "exp": exp})
	b.token = signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": "bob", "exp": exp})
	return &a, &b
}

// reportLines downloads report id as who and returns its lines by type.
func reportLines(t *testing.T, who *testServer, id string) map[string][]map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", who.URL+"/v1/sandbox/observe/reports/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+who.token)
	resp, err := who.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/gzip" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("download %s: %d %s: %s", id, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]map[string]any{}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 16<<20)
	first := true
	for sc.Scan() {
		var l struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("report %s: a line is not JSON: %v: %.200s", id, err, sc.Bytes())
		}
		if first && l.Type != "observation" {
			t.Fatalf("report %s: first line is %q, want the observation's header", id, l.Type)
		}
		first = false
		out[l.Type] = append(out[l.Type], l.Data)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitStatus polls alice's observation status until ok says so.
func waitStatus(t *testing.T, who *testServer, what string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		d := who.sdkOK(t, "GET", "v1/sandbox/observe/status", nil).data()
		if ok(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("observation status never showed %s: %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestV1ObserveLive: the SDK's observe_live (issue 42) under tenant
// isolation reads the caller's tenant: its group's memory and quotas,
// its processes (the kernel that holds 80 MiB first, as "user"), its home
// and /tmp; CPU percentages come from the second reading on; another
// tenant reads none of it; a bad top_rows is 422.
func TestV1ObserveLive(t *testing.T) {
	t.Parallel()
	alice, bob := observers(t, backend.Isolation{MemoryBytes: 1 << 30, Pids: 256, TenantMemoryBytes: 2 << 30, TenantPids: 512})
	if st, env, _ := alice.exec(t, map[string]any{"language": "python", "session_id": "obs", "code": "x = bytearray(80 << 20)\nimport os\nprint(os.getpid())"}); st != 200 || env["success"] != true {
		t.Fatalf("exec: %d %v", st, env)
	}
	live := alice.sdkOK(t, "GET", "v1/sandbox/observe/live?top_rows=3", nil).data()
	cg, _ := live["cgroup"].(map[string]any)
	if live["mode"] != "off" || live["scope"] != "tenant" || cg["mem_current_bytes"].(float64) < 80<<20 || cg["mem_max_bytes"] != float64(2<<30) || cg["pids_max"] != 512.0 {
		t.Fatalf("live: %v", live)
	}
	if cg["cpu_usage_pct"] != nil {
		t.Errorf("a first reading has no CPU rate to give: %v", cg["cpu_usage_pct"])
	}
	top := topProcess(t, live, 3)
	if top["rss_bytes"].(float64) < 80<<20 || !strings.HasPrefix(top["comm"].(string), "python") || top["user"] != "user" || top["threads"].(float64) < 1 || top["state"] == nil {
		t.Errorf("the largest process is not the tenant's kernel holding 80 MiB: %v", top)
	}
	disks, _ := live["disk"].([]any)
	if len(disks) < 2 || disks[0].(map[string]any)["path"] != "/home/user" || disks[0].(map[string]any)["total_bytes"].(float64) <= 0 {
		t.Errorf("disk: %v", disks)
	}
	waitCPURate(t, alice)

	other := bob.sdkOK(t, "GET", "v1/sandbox/observe/live?top_rows=50", nil).data()
	if n := len(other["top_processes"].([]any)); n != 0 || other["cgroup"].(map[string]any)["mem_current_bytes"] != 0.0 {
		t.Errorf("bob, with no session, reads %d processes and %v bytes", n, other["cgroup"].(map[string]any)["mem_current_bytes"])
	}
	for _, q := range []string{"-1", "x", "1001"} {
		alice.sdk422(t, "GET", "v1/sandbox/observe/live?top_rows="+q, nil, "query", "top_rows")
	}
}

// TestV1ObserveLiveSessions: without tenant isolation, observe_live reads
// the runtimes of the caller's sessions and what they started: their
// memory and limits summed, the kernel among the processes, the working
// folder's disk.
func TestV1ObserveLiveSessions(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Isolation: backend.Isolation{Isolation: isolate.ModeNone, MemoryBytes: 1 << 30, Pids: 256}})
	if st, env, _ := ts.exec(t, map[string]any{"language": "python", "session_id": "obs", "code": "x = bytearray(80 << 20)\nimport subprocess\nchild = subprocess.Popen(['sleep', '600'])"}); st != 200 || env["success"] != true {
		t.Fatalf("exec: %d %v", st, env)
	}
	live := ts.sdkOK(t, "GET", "v1/sandbox/observe/live?top_rows=20", nil).data()
	cg, _ := live["cgroup"].(map[string]any)
	if live["scope"] != "sessions" || cg["mem_current_bytes"].(float64) < 80<<20 || cg["mem_max_bytes"] != float64(1<<30) || cg["pids_max"] != 256.0 || cg["oom_kill"] != 0.0 {
		t.Fatalf("live: %v", live)
	}
	top := topProcess(t, live, 20)
	if top["rss_bytes"].(float64) < 80<<20 || !strings.HasPrefix(top["comm"].(string), "python") {
		t.Errorf("the largest process is not the kernel holding 80 MiB: %v", top)
	}
	sleeping := false
	for _, p := range live["top_processes"].([]any) {
		sleeping = sleeping || p.(map[string]any)["comm"] == "sleep"
	}
	if !sleeping {
		t.Errorf("the kernel's child is not among the session's processes: %v", live["top_processes"])
	}
	waitCPURate(t, ts)
	ts.exec(t, map[string]any{"language": "python", "session_id": "obs", "code": "child.kill(); child.wait()"})
}

// topProcess is a live answer's first process row, checking that there
// are some and at most rows.
func topProcess(t *testing.T, live map[string]any, rows int) map[string]any {
	t.Helper()
	procs, _ := live["top_processes"].([]any)
	if len(procs) == 0 || len(procs) > rows {
		t.Fatalf("top_rows=%d: %d rows: %v", rows, len(procs), procs)
	}
	return procs[0].(map[string]any)
}

// waitCPURate reads live until a reading gives a CPU rate: every one
// after the first that is a tenth of a second or more after it.
func waitCPURate(t *testing.T, who *testServer) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(150 * time.Millisecond) {
		cg := who.sdkOK(t, "GET", "v1/sandbox/observe/live", nil).data()["cgroup"].(map[string]any)
		if _, ok := cg["cpu_usage_pct"].(float64); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("later readings give no CPU rate: %v", cg)
		}
	}
}

// TestV1ObserveCapture: observe_start, status, export, stop, reports and
// their download and delete, as the SDK sends them (issue 42): one
// observation a sandbox (409 for a second, the same idempotency_key
// answers the first), samples in the report, a stop's report, the
// other tenant's reports out of reach, bad fields 422 naming them.
func TestV1ObserveCapture(t *testing.T) {
	t.Parallel()
	alice, bob := observers(t, backend.Isolation{MemoryBytes: 1 << 30})
	alice.exec(t, map[string]any{"language": "python", "session_id": "cap", "code": "1"})

	for field, body := range map[string]map[string]any{
		"mode":             {"mode": "watch"},
		"interval_seconds": {"interval_seconds": 0.01},
		"duration_seconds": {"duration_seconds": 0},
		"idempotency_key":  {"idempotency_key": strings.Repeat("k", 129)},
		"include_disk":     {"include_disk": "maybe"},
	} {
		alice.sdk422(t, "POST", "v1/sandbox/observe/start", body, "body", field)
	}
	if st := alice.sdkOK(t, "GET", "v1/sandbox/observe/status", nil).data(); st["running"] != false || st["mode"] != "off" || st["report_count"] != 0.0 {
		t.Fatalf("status before: %v", st)
	}
	s := alice.sdkOK(t, "POST", "v1/sandbox/observe/start", map[string]any{"interval_seconds": 0.25, "idempotency_key": "k1"}).data()
	id, _ := s["session_id"].(string)
	if id == "" || s["mode"] != "capture" || s["interval_seconds"] != 0.25 || s["ends_at"] != nil || s["runtime_dir"] == "" {
		t.Fatalf("start: %v", s)
	}
	if again := alice.sdkOK(t, "POST", "v1/sandbox/observe/start", map[string]any{"idempotency_key": "k1"}).data(); again["session_id"] != id {
		t.Errorf("the same idempotency_key started another: %v", again)
	}
	alice.sdkStatus(t, "POST", "v1/sandbox/observe/start", map[string]any{"mode": "guardrail"}, http.StatusConflict)
	if st := bob.sdkOK(t, "GET", "v1/sandbox/observe/status", nil).data(); st["running"] != false {
		t.Errorf("bob sees alice's observation: %v", st)
	}
	bob.sdkStatus(t, "POST", "v1/sandbox/observe/stop", map[string]any{"session_id": id}, http.StatusNotFound)

	// Three samples at least: the start's and two ticks.
	st := waitStatus(t, alice, "a sample", func(d map[string]any) bool { return d["last_sample_at"] != nil })
	if st["running"] != true || st["session_id"] != id || st["mode"] != "capture" {
		t.Fatalf("status: %v", st)
	}
	// A second of CPU, however loaded the machine; then a sample taken
	// after it, so that the report holds all of it.
	alice.exec(t, map[string]any{"language": "python", "session_id": "cap", "code": "import time\nt0 = time.process_time()\nwhile time.process_time() - t0 < 1: pass"})
	ran := time.Now().UTC()
	waitStatus(t, alice, "a sample after the busy loop", func(d map[string]any) bool {
		at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(d["last_sample_at"]))
		return at.After(ran)
	})
	ex := alice.sdkOK(t, "POST", "v1/sandbox/observe/export", map[string]any{"reason": "check", "idempotency_key": "e1"}).data()
	rid, _ := ex["report_id"].(string)
	if rid == "" || ex["session_id"] != id || ex["reason"] != "check" || ex["size_bytes"].(float64) <= 0 {
		t.Fatalf("export: %v", ex)
	}
	if same := alice.sdkOK(t, "POST", "v1/sandbox/observe/export", map[string]any{"idempotency_key": "e1"}).data(); same["report_id"] != rid {
		t.Errorf("the same idempotency_key wrote another report: %v", same)
	}
	lines := reportLines(t, alice, rid)
	if h := lines["observation"][0]; h["session_id"] != id || h["mode"] != "capture" || h["reason"] != "check" || len(lines["start"]) != 1 {
		t.Errorf("report header: %v", lines["observation"])
	}
	if len(lines["sample"]) < 2 {
		t.Fatalf("report %s holds %d samples, want the ones taken so far", rid, len(lines["sample"]))
	}
	// The samples' CPU time, first to last, holds the loop's second (the
	// clock ticks are 10 ms).
	first := lines["sample"][0]["cgroup"].(map[string]any)["cpu_usage_usec"].(float64)
	last := lines["sample"][len(lines["sample"])-1]["cgroup"].(map[string]any)["cpu_usage_usec"].(float64)
	if last-first < 900000 {
		t.Errorf("the samples' CPU time rose by %.0f µs, want the busy loop's second: %v", last-first, lines["sample"])
	}

	// Bob cannot list, read or remove alice's reports.
	if l := bob.sdkOK(t, "GET", "v1/sandbox/observe/reports", nil); len(l.Body["data"].([]any)) != 0 {
		t.Errorf("bob lists: %s", l.Raw)
	}
	bob.sdkStatus(t, "GET", "v1/sandbox/observe/reports/"+rid, nil, http.StatusNotFound)
	bob.sdkStatus(t, "DELETE", "v1/sandbox/observe/reports/"+rid, nil, http.StatusNotFound)
	bob.sdkStatus(t, "POST", "v1/sandbox/observe/export", map[string]any{"session_id": id}, http.StatusNotFound)

	stop := alice.sdkOK(t, "POST", "v1/sandbox/observe/stop", map[string]any{"session_id": id}).data()
	if stop["session_id"] != id || stop["stopped"] != true || stop["report_ready"] != true {
		t.Fatalf("stop: %v", stop)
	}
	if st := alice.sdkOK(t, "GET", "v1/sandbox/observe/status", nil).data(); st["running"] != false || st["report_count"] != 2.0 {
		t.Errorf("status after the stop: %v", st)
	}
	if again := alice.sdkOK(t, "POST", "v1/sandbox/observe/stop", nil).data(); again["stopped"] != false {
		t.Errorf("a stop with nothing running: %v", again)
	}
	if ended := alice.sdkOK(t, "POST", "v1/sandbox/observe/stop", map[string]any{"session_id": id}).data(); ended["stopped"] != false || ended["report_ready"] != true {
		t.Errorf("a stop of the ended one: %v", ended)
	}
	reps := alice.sdkOK(t, "GET", "v1/sandbox/observe/reports", nil).Body["data"].([]any)
	if len(reps) != 2 || reps[0].(map[string]any)["reason"] != "stop" || reps[1].(map[string]any)["report_id"] != rid {
		t.Fatalf("reports, newest first: %v", reps)
	}
	final := reps[0].(map[string]any)["report_id"].(string)
	if fin := reportLines(t, alice, final); len(fin["sample"]) < len(lines["sample"]) {
		t.Errorf("the stop's report holds %d samples, the export before it %d", len(fin["sample"]), len(lines["sample"]))
	}
	if e := alice.sdkOK(t, "POST", "v1/sandbox/observe/export", map[string]any{"session_id": id}).data(); e["report_id"] != final {
		t.Errorf("export of the ended observation: %v, want its final report %s", e, final)
	}

	// Without an observation, an export is one reading now.
	one := alice.sdkOK(t, "POST", "v1/sandbox/observe/export", nil).data()
	if one["session_id"] != nil {
		t.Errorf("a reading's report names an observation: %v", one)
	}
	if l := reportLines(t, alice, one["report_id"].(string)); len(l["sample"]) != 1 {
		t.Errorf("a reading's report: %v", l)
	}
	del := alice.sdkOK(t, "DELETE", "v1/sandbox/observe/reports/"+rid, nil).data()
	if del["report_id"] != rid {
		t.Errorf("delete answers %v", del)
	}
	alice.sdkStatus(t, "GET", "v1/sandbox/observe/reports/"+rid, nil, http.StatusNotFound)
	alice.sdkStatus(t, "GET", "v1/sandbox/observe/reports/..%2F..%2Fetc", nil, http.StatusNotFound)
}

// TestV1ObserveGuardrail: a guardrail observation with a duration sees
// the memory of its sandbox cross 90 % of the runtime's limit, notes the
// event (live's recent_events), writes a report by itself, and ends at
// its duration with a report of reason "duration".
func TestV1ObserveGuardrail(t *testing.T) {
	t.Parallel()
	alice, _ := observers(t, backend.Isolation{MemoryBytes: 256 << 20})
	alice.exec(t, map[string]any{"language": "python", "session_id": "g", "code": "1"})
	s := alice.sdkOK(t, "POST", "v1/sandbox/observe/start", map[string]any{"mode": "guardrail", "interval_seconds": 0.25, "duration_seconds": 3600, "include_processes": false}).data()
	if s["ends_at"] == nil || s["mode"] != "guardrail" {
		t.Fatalf("start: %v", s)
	}
	waitStatus(t, alice, "a sample", func(d map[string]any) bool { return d["last_sample_at"] != nil })
	// The kernel grows, 4 MiB at a time, until its group (what its limit
	// counts: pages it shares with the template are not its) holds 92 %
	// of its 256 MiB.
	alice.exec(t, map[string]any{"language": "python", "session_id": "g", "code": "chunks = []"})
	for {
		_, stats := alice.call(t, "GET", "/v2/code/sessions/g/stats", nil)
		d, _ := stats["data"].(map[string]any)
		if mem, _ := d["memory_bytes"].(float64); mem >= 0.92*(256<<20) {
			break
		} else if mem == 0 {
			t.Fatalf("stats: %v", stats)
		}
		if st, env, _ := alice.exec(t, map[string]any{"language": "python", "session_id": "g", "code": "chunks.append(b'x' * (4 << 20))"}); st != 200 || env["success"] != true {
			t.Fatalf("grow from %v: %d %v", d, st, env)
		}
	}
	var ev map[string]any
	for deadline := time.Now().Add(2 * time.Minute); ev == nil; time.Sleep(100 * time.Millisecond) {
		for _, e := range alice.sdkOK(t, "GET", "v1/sandbox/observe/live", nil).data()["recent_events"].([]any) {
			if e.(map[string]any)["type"] == "memory_high" {
				ev = e.(map[string]any)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no memory_high event with the kernel at 92 % of its 256 MiB")
		}
	}
	if d := ev["data"].(map[string]any); d["mem_max_bytes"] != float64(256<<20) || d["scope"] != "runtime" || d["pid"] == nil {
		t.Errorf("event: %v", ev)
	}
	var auto string
	for deadline := time.Now().Add(time.Minute); auto == ""; time.Sleep(100 * time.Millisecond) {
		for _, r := range alice.sdkOK(t, "GET", "v1/sandbox/observe/reports", nil).Body["data"].([]any) {
			if r.(map[string]any)["reason"] == "guardrail:memory_high" {
				auto = r.(map[string]any)["report_id"].(string)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the guardrail wrote no report of its own")
		}
	}
	l := reportLines(t, alice, auto)
	if len(l["event"]) == 0 || l["event"][0]["type"] != "memory_high" || len(l["sample"]) == 0 {
		t.Errorf("guardrail report: %d events, %d samples", len(l["event"]), len(l["sample"]))
	}
	for _, smp := range l["sample"] {
		if n := len(smp["top_processes"].([]any)); n != 0 {
			t.Errorf("include_processes false, yet a sample has %d rows", n)
		}
	}
}
