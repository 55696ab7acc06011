package gateway

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/aiod/aiod/gateway/wsock"
)

// scrape reads /metrics (with the token when one is given) and parses it
// with the Prometheus text parser.
func scrape(t testing.TB, ts *testServer, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest("GET", ts.URL+MetricsPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// value is the sample of family name whose labels include want (a counter's
// or gauge's value, a histogram's count); -1 when there is none.
func value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	mf := mfs[name]
	if mf == nil {
		return -1
	}
	total, found := 0.0, false
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	if !found {
		return -1
	}
	return total
}

// series lists every sample of the aiod families (name and labels), and
// returns every label value seen in them.
func series(mfs map[string]*dto.MetricFamily) ([]string, []string) {
	var out, vals []string
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "aiod_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			id := name
			for _, l := range m.GetLabel() {
				vals = append(vals, l.GetValue())
				id += " " + l.GetName() + "=" + l.GetValue()
			}
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, vals
}

// TestMetrics runs executions, starts, pool takes, an idle reclaim, a
// death, a slow-consumer close and HTTP requests against a live gateway,
// and reads each one back from /metrics, behind the token.
func TestMetrics(t *testing.T) {
	t.Parallel()
	const token = "metrics-token"
	ts := startServer(t, Config{Token: token, NativeIdle: 1500 * time.Millisecond, ReapInterval: 200 * time.Millisecond, CodePrewarm: 1,
		LiveLimits: wsock.Limits{QueueBytes: 256 << 10, WriteTimeout: time.Minute}}) // small: the slow consumer below
	if st, _ := ts.callRaw(t, "GET", MetricsPath); st != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token: %d, want 401 (it is behind the API's credentials)", st)
	}
	ts.token = token
	auth := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		return ts.call(t, method, path, body)
	}
	before := scrape(t, ts, token)
	for _, name := range []string{"aiod_sessions", "aiod_ws_connections", "aiod_build_info", "go_goroutines", "process_resident_memory_bytes"} {
		if before[name] == nil {
			t.Errorf("family %s missing", name)
		}
	}

	// Executions (ok, error), runtime starts (from the pool, then cold), output bytes.
	if st, env := auth("POST", "/v2/code/execute", map[string]any{"language": "javascript", "code": "console.log('x'.repeat(1000))"}); st != 200 || env["success"] != true {
		t.Fatalf("execute: %d %v", st, env)
	}
	if st, env := auth("POST", "/v2/code/execute", map[string]any{"language": "javascript", "code": "throw new Error('boom')", "session_id": "m-err"}); st != 200 || env["success"] != false {
		t.Fatalf("execute error: %d %v", st, env)
	}
	// Python too, in a kernel: its duration lands in the histogram.
	if st, env := auth("POST", "/v2/code/execute", map[string]any{"language": "python", "code": "print(1)"}); st != 200 || env["success"] != true {
		t.Fatalf("python: %d %v", st, env)
	}
	// A death: the REPL kills itself.
	auth("POST", "/v2/code/execute", map[string]any{"language": "javascript", "code": "process.kill(process.pid, 'SIGKILL')", "session_id": "m-die"})
	// An idle reclaim: m-idle is left alone past --native-idle.
	auth("POST", "/v2/code/execute", map[string]any{"language": "javascript", "code": "1", "session_id": "m-idle"})
	if v := value(scrape(t, ts, token), "aiod_sessions", map[string]string{"language": "javascript", "backend": "native"}); v < 1 {
		t.Errorf("aiod_sessions{javascript,native} = %v with m-idle alive", v)
	}
	deadline := time.Now().Add(30 * time.Second)
	for ts.Registry().Get("token", "javascript", "m-idle") != nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	// A slow consumer: a socket that does not read while a flood is sent.
	c := dialWSAuth(t, ts, token)
	sendJSON(t, c, map[string]any{"type": "execute", "id": "flood", "language": "javascript", "timeout": 120,
		"code": "for (let i = 0; i < 400; i++) process.stdout.write('y'.repeat(16384) + '\\n')"})
	deadline = time.Now().Add(60 * time.Second)
	for ts.LiveStats()["close:slow_consumer"] < 1 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}

	after := scrape(t, ts, token)
	checks := []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"aiod_executions_total", map[string]string{"language": "javascript", "backend": "native", "status": "ok"}, 2},
		{"aiod_executions_total", map[string]string{"language": "javascript", "backend": "native", "status": "error"}, 2}, // the throw, and the death
		{"aiod_executions_total", map[string]string{"language": "python", "status": "ok"}, 1},
		{"aiod_execution_duration_seconds", map[string]string{"language": "python"}, 1},
		{"aiod_execution_duration_seconds", map[string]string{"language": "javascript", "backend": "native"}, 4},
		{"aiod_runtime_starts_total", map[string]string{"language": "javascript", "mode": "pool", "result": "ok"}, 1},
		{"aiod_runtime_starts_total", map[string]string{"language": "javascript", "result": "ok"}, 4},
		{"aiod_runtime_start_duration_seconds", map[string]string{"language": "javascript", "backend": "native"}, 4},
		{"aiod_pool_takes_total", map[string]string{"language": "javascript", "result": "hit"}, 1},
		{"aiod_idle_reclaims_total", map[string]string{"language": "javascript"}, 1},
		{"aiod_runtime_deaths_total", map[string]string{"language": "javascript", "cause": "SIGKILL"}, 1},
		{"aiod_output_bytes_total", map[string]string{"language": "javascript"}, 1000},
		{"aiod_ws_closes_total", map[string]string{"route": "/v2/code/ws", "reason": "slow_consumer"}, 1},
		{"aiod_ws_connections", map[string]string{"route": "/v2/code/ws"}, 0},
		{"aiod_http_requests_total", map[string]string{"route": "/v2/code/execute", "method": "POST", "code": "200"}, 5},
		{"aiod_http_requests_total", map[string]string{"route": "unmatched", "method": "GET", "code": "401"}, 1},
		{"aiod_http_request_duration_seconds", map[string]string{"route": "/v2/code/execute", "method": "POST"}, 5},
		{"aiod_sessions", map[string]string{"language": "javascript", "backend": "native"}, 0}, // reclaimed by now
		{"aiod_build_info", map[string]string{"version": Version}, 1},
	}
	for _, c := range checks {
		if v := value(after, c.name, c.labels); v < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, v, c.min)
		}
	}
	if v := value(after, "aiod_executions_total", map[string]string{"status": "ok"}); v <= value(before, "aiod_executions_total", map[string]string{"status": "ok"}) {
		t.Errorf("aiod_executions_total did not move: %v", v)
	}
	// Every counter Counters keeps is served, the mux's and the hub's included.
	for _, c := range ts.Registry().Counters().Snapshot() {
		if after["aiod_"+c.Name+"_total"] == nil {
			t.Errorf("counter %s (%s) is not served", c.Name, c.Label)
		}
	}
}

// TestMetricsLabelsBounded runs 500 executions on 500 session ids: the
// number of aiod series must not grow with them, and no label holds an id.
// The sessions are bash's, the runtime cheapest to start (500 Node.js
// processes took about a minute of the suite's CPU).
func TestMetricsLabelsBounded(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{MetricsPublic: true, Token: "x"})
	ts.token = "x"
	run := func(from, to int) {
		t.Helper()
		var wg sync.WaitGroup
		ids := make(chan int)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range ids {
					sid := fmt.Sprintf("bound-%03d", i)
					st, env := ts.call(t, "POST", "/v2/code/execute", map[string]any{"language": "bash", "code": fmt.Sprintf("echo %d", i), "session_id": sid})
					if st != 200 || env["success"] != true {
						t.Errorf("execute %s: %d %v", sid, st, env)
					}
					if st, _ := ts.call(t, "DELETE", "/v2/code/sessions/"+sid, nil); st != 200 {
						t.Errorf("delete %s: %d", sid, st)
					}
				}
			}()
		}
		for i := from; i < to; i++ {
			ids <- i
		}
		close(ids)
		wg.Wait()
	}
	run(0, 20)
	scrape(t, ts, "")                   // so that /metrics' own request series exist
	s20, _ := series(scrape(t, ts, "")) // public: no token needed
	run(20, 500)
	mfs := scrape(t, ts, "")
	s500, vals := series(mfs)
	if len(s500) != len(s20) {
		t.Errorf("aiod series grew from %d (after 20 sessions) to %d (after 500):\n%s\n---\n%s", len(s20), len(s500), strings.Join(s20, "\n"), strings.Join(s500, "\n"))
	}
	sort.Strings(vals)
	for _, v := range vals {
		if strings.Contains(v, "bound-") {
			t.Fatalf("a label holds a session id: %q", v)
		}
	}
	if got := value(mfs, "aiod_executions_total", map[string]string{"language": "bash", "status": "ok"}); got != 500 {
		t.Errorf("aiod_executions_total{bash,ok} = %v, want 500", got)
	}
	t.Logf("%d aiod series after 20 and after 500 sessions", len(s500))
}

// dialWSAuth opens /v2/code/ws with a bearer token.
func dialWSAuth(t testing.TB, ts *testServer, token string) *websocket.Conn {
	t.Helper()
	return dialWS(t, ts, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
}

// TestTenantsGauge: aiod_tenants counts the tenants whose sandbox aiod
// holds, and aiod_held_code_bytes is back to 0 once the calls are over.
func TestTenantsGauge(t *testing.T) {
	t.Parallel()
	key := testRSAKey()
	ts := startServer(t, Config{Token: "s3cret", JWTPublicKey: pemOf(t, &key.PublicKey)})
	before := value(scrape(t, ts, "s3cret"), "aiod_tenants", nil)
	for _, sub := range []string{"alice", "bob"} {
		ts.token = signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
		if st, _, data := ts.exec(t, map[string]any{"language": "javascript", "code": "console.log(1)"}); st != 200 || data["stdout"] != "1\n" {
			t.Fatalf("%s: %d %v", sub, st, data)
		}
	}
	mfs := scrape(t, ts, "s3cret")
	if got := value(mfs, "aiod_tenants", nil); got != before+2 {
		t.Errorf("aiod_tenants %v after alice and bob, %v before", got, before)
	}
	if got := value(mfs, "aiod_held_code_bytes", nil); got != 0 {
		t.Errorf("aiod_held_code_bytes %v with no call in flight", got)
	}
}
