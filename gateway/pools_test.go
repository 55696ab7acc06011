package gateway

import (
	"fmt"
	"testing"
	"time"
)

func poolStats(t *testing.T, ts *testServer, name string) map[string]any {
	t.Helper()
	_, env := ts.call(t, "GET", "/v2/code/info", nil)
	return env["data"].(map[string]any)["pools"].(map[string]any)[name].(map[string]any)
}

func waitPoolReady(t *testing.T, ts *testServer, name string, n float64) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for poolStats(t, ts, name)["ready"] != n {
		if time.Now().After(deadline) {
			t.Fatalf("pool %s never had %v ready: %v", name, n, poolStats(t, ts, name))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestKernelPoolServesOneShotsAndRefills(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{KernelPrewarm: 2}, warmKernels)
	waitPoolReady(t, ts, "kernel", 2)
	if st := poolStats(t, ts, "kernel"); st["size"] != 2.0 || st["warmup"] != true {
		t.Fatalf("pool stats %v", st)
	}
	// Warm-up imports bind no names and do not count as executions, and
	// the priming's output is not the first caller's.
	_, _, data := ts.exec(t, map[string]any{"language": "python", "code": "print('pandas' in dir(), 'matplotlib' in dir(), repr(_), len(Out))"})
	if data["stdout"] != "False False '' 0\n" || data["stderr"] != "" || data["execution_count"] != 1.0 || len(outputs(data)) != 1 {
		t.Fatalf("pooled one-shot: %v", data)
	}
	_, _, data = ts.exec(t, map[string]any{"language": "python", "code": "leak = 1"})
	_, _, data = ts.exec(t, map[string]any{"language": "python", "code": "print('leak' in dir())"})
	if data["stdout"] != "False\n" {
		t.Fatalf("state leaked between pooled one-shots: %v", data)
	}
	// A new named session also takes a pooled kernel; %matplotlib inline still works.
	_, _, data = ts.exec(t, map[string]any{"language": "python", "session_id": "p",
		"code": "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"})
	found := false
	for _, o := range outputs(data) {
		if o["output_type"] == "display_data" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no inline chart from a pooled kernel: %v", data)
	}
	waitPoolReady(t, ts, "kernel", 2)
	if st := poolStats(t, ts, "kernel"); st["taken"].(float64) < 2 || st["taken"].(float64)+st["misses"].(float64) != 4 {
		t.Fatalf("pool was not used: %v", st)
	}
}

func TestCodePoolServesJavaScript(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{CodePrewarm: 1})
	waitPoolReady(t, ts, "javascript", 1)
	for i := 0; i < 3; i++ {
		_, _, data := ts.exec(t, map[string]any{"language": "javascript", "code": fmt.Sprintf("console.log(typeof seen, %d); globalThis.seen = 1", i)})
		if data["stdout"] != fmt.Sprintf("undefined %d\n", i) {
			t.Fatalf("pooled javascript one-shot %d: %v", i, data)
		}
	}
	waitPoolReady(t, ts, "javascript", 1)
	if st := poolStats(t, ts, "javascript"); st["taken"].(float64) < 1 {
		t.Fatalf("javascript pool unused: %v", st)
	}
}

// TestTokenTenantPrewarmed: with --token every caller is the token's one
// tenant, whose pools fill at start like the default tenant's, so the
// first session of the first caller takes a ready kernel (pool "taken",
// no miss) instead of a cold start.
func TestTokenTenantPrewarmed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{KernelPrewarm: 1, Token: "tok-prewarm"})
	ts.token = "tok-prewarm"
	waitPoolReady(t, ts, "kernel", 1)
	_, _, data := ts.exec(t, map[string]any{"language": "python", "session_id": "first", "code": "print('hi')"})
	if data["stdout"] != "hi\n" {
		t.Fatalf("first session: %v", data)
	}
	if st := poolStats(t, ts, "kernel"); st["taken"] != 1.0 || st["misses"] != 0.0 {
		t.Fatalf("the token tenant's first session did not take a pooled kernel: %v", st)
	}
}
