package gateway

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/aiod/aiod/kernel/remote/remotetest"
	"github.com/aiod/aiod/stream/backend"
)

// remoteIsolation runs these gateways without tenant isolation: their
// Python runs on a Jupyter server, on that server's file system, and the
// walkthrough's files must meet its kernels there; a tenant's view is
// aiod's own local runtimes'.
var remoteIsolation = backend.Isolation{Isolation: "none"}

func remoteInfo(t *testing.T, ts *testServer) map[string]any {
	t.Helper()
	_, env := ts.call(t, "GET", "/v2/code/info", nil)
	d := env["data"].(map[string]any)
	r, _ := d["remote"].(map[string]any)
	if r == nil {
		t.Fatalf("no remote in /v2/code/info: %v", d)
	}
	r["backend"] = d["backend"]
	return r
}

// reachableRemote is remoteInfo once aiod has seen the server answer. A
// probe the server did not answer in time (a loaded machine) marks it
// unreachable until the next one, and a session made meanwhile runs on the
// local kernel, as designed: a test of the remote waits for a probe that
// passed (every 200 ms or second in these tests) before it makes one.
func reachableRemote(t *testing.T, ts *testServer) map[string]any {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ri := remoteInfo(t, ts)
		if ri["reachable"] == true {
			return ri
		}
		if time.Now().After(deadline) {
			t.Fatalf("the remote server was not reachable within 90 s: %v", ri)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// With AIO_JUPYTER_ENDPOINT set, Python runs on the remote Jupyter server:
// the walkthrough, rich outputs and timeouts behave as on local kernels.
func TestRemoteJupyterBackend(t *testing.T) {
	t.Parallel()
	js := remotetest.Start(t)
	ts := startServer(t, Config{JupyterEndpoint: js.URL, JupyterToken: js.Token, JupyterProbeInterval: 200 * time.Millisecond, Isolation: remoteIsolation})
	ri := reachableRemote(t, ts)
	if ri["backend"] != "jupyter" || ri["version"] == "" {
		t.Fatalf("remote info: %v", ri)
	}
	_, env := ts.call(t, "GET", "/v2/sandbox", nil)
	ci := env["data"].(map[string]any)["capabilities"].(map[string]any)["code_interpreter"].(map[string]any)
	if ci["backend"] != "jupyter" {
		t.Fatalf("sandbox backend %v", ci["backend"])
	}

	kerneltest.LockWalkthrough(t)
	out, err := exec.Command("/usr/bin/python3", "../examples/walkthrough.py", ts.URL, t.TempDir()).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "count     6.000000\nmean     57.500000\nstd      13.546217") {
		t.Fatalf("walkthrough on the remote backend: %v\n%s", err, out)
	}
	st, envr, data := ts.exec(t, map[string]any{"language": "python", "session_id": "r", "code": "import os\nx = 41\nprint(os.getpid())"})
	if st != 200 || data["status"] != "ok" {
		t.Fatalf("remote exec: %v", envr)
	}
	_, _, data = ts.exec(t, map[string]any{"language": "python", "session_id": "r",
		"code": "import pandas as pd\npd.DataFrame({'a': [1]})"})
	if o := outputs(data); len(o) != 1 || o[0]["data"].(map[string]any)["text/html"] == nil {
		t.Fatalf("remote DataFrame: %v", data)
	}
	start := time.Now()
	_, _, data = ts.exec(t, map[string]any{"language": "python", "session_id": "r", "code": "while True: pass", "timeout": 1})
	if data["status"] != "timeout" {
		t.Fatalf("remote timeout: %v after %s", data, time.Since(start))
	}
	_, _, data = ts.exec(t, map[string]any{"language": "python", "session_id": "r", "code": "print(x + 1)"})
	if data["stdout"] != "42\n" {
		t.Fatalf("remote session lost x after the interrupt: %v", data)
	}
}

// A kernel deleted behind aiod's back (culling) is reported, the next call
// gets a fresh kernel and says so; a dead server makes calls fail clearly,
// then new calls fall back to the embedded kernel.
func TestRemoteKernelLossAndServerDeath(t *testing.T) {
	t.Parallel()
	js := remotetest.Start(t)
	ts := startServer(t, Config{JupyterEndpoint: js.URL, JupyterToken: js.Token, JupyterProbeInterval: 200 * time.Millisecond, Isolation: remoteIsolation})
	reachableRemote(t, ts)
	ts.exec(t, map[string]any{"language": "python", "session_id": "c", "code": "x = 1"})
	// Cull every kernel on the server.
	req := func(method, path string) {
		c := exec.Command("/usr/bin/python3", "-c", fmt.Sprintf(`
import httpx, sys
h = {"Authorization": "token %s"}
for k in httpx.get("%s/api/kernels", headers=h).json():
    httpx.delete("%s/api/kernels/" + k["id"], headers=h)
`, js.Token, js.URL, js.URL))
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("cull: %v %s", err, out)
		}
	}
	req("DELETE", "/api/kernels")
	var env, data map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, env, data = ts.exec(t, map[string]any{"language": "python", "session_id": "c", "code": "print('x' in dir())"})
		if data["status"] == "error" || data["fresh_runtime"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("culled kernel never reported: %v", env)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if data["status"] == "error" && !strings.Contains(fmt.Sprint(env["message"]), "gone") {
		t.Fatalf("culled kernel: %v", env)
	}
	_, env, data = ts.exec(t, map[string]any{"language": "python", "session_id": "c", "code": "print('x' in dir())"})
	if data["stdout"] != "False\n" {
		t.Fatalf("after culling: %v", env)
	}

	js.Kill()
	_, env, data = ts.exec(t, map[string]any{"language": "python", "session_id": "c", "code": "print(1)"})
	if data == nil || data["status"] != "error" {
		// The call may also fail to start a kernel (503): that too names the endpoint.
		if !strings.Contains(fmt.Sprint(env["message"]), js.URL) {
			t.Fatalf("call on a dead server: %v", env)
		}
	}
	deadline = time.Now().Add(15 * time.Second)
	for remoteInfo(t, ts)["reachable"] != false {
		if time.Now().After(deadline) {
			t.Fatal("dead server still reported reachable")
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, env, data = ts.exec(t, map[string]any{"language": "python", "code": "print(2)"})
	if data["stdout"] != "2\n" {
		t.Fatalf("no fallback to the embedded kernel: %v", env)
	}
	if ri := remoteInfo(t, ts); ri["backend"] != "kernel" {
		t.Fatalf("backend after the server died: %v", ri)
	}
}

// Streaming over /v2/code/ws behaves the same with the remote backend: the
// three lines arrive as separate outputs before the result, the first
// while the code still runs (threeLines: it waits for the test to see it).
func TestRemoteStreamingOverWebSocket(t *testing.T) {
	t.Parallel()
	js := remotetest.Start(t)
	ts := startServer(t, Config{JupyterEndpoint: js.URL, JupyterToken: js.Token, JupyterProbeInterval: 200 * time.Millisecond, Isolation: remoteIsolation})
	reachableRemote(t, ts)
	c := dialWS(t, ts, nil)
	defer c.CloseNow()
	// The remote kernel is a process of the Jupyter Server, on this host.
	gate := filepath.Join(t.TempDir(), "first-line-seen")
	sendJSON(t, c, map[string]any{"type": "execute", "id": "r1", "language": "python", "code": threeLines(gate), "session_id": "rs"})
	var msgs, outs []wsMsg
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := readJSON(t, c, time.Until(deadline))
		msgs = append(msgs, m)
		if m.typ() == "output" {
			outs = append(outs, m)
			openGate(t, gate)
		}
		if m.typ() == "result" && m.id() == "r1" {
			break
		}
	}
	if len(outs) != 3 {
		t.Fatalf("want 3 outputs, got %d: %v", len(outs), msgs)
	}
	res := msgs[len(msgs)-1].m
	if res["success"] != true || res["data"].(map[string]any)["stdout"] != "0\n1\n2\n" {
		t.Fatalf("result %v", res)
	}
	if ts.Registry().Get("default", "python", "rs").Runtime().Info().Backend != "jupyter" {
		t.Fatal("the session did not run on the remote server")
	}
}

// aiod → aiod: one aiod serves the Jupyter kernels API, another uses it as
// its AIO_JUPYTER_ENDPOINT; the walkthrough runs through both.
func TestAiodAsRemoteOfAiod(t *testing.T) {
	t.Parallel()
	back := startServer(t, Config{Token: "backtoken", Isolation: remoteIsolation})
	front := startServer(t, Config{JupyterEndpoint: back.URL, JupyterToken: "backtoken", JupyterProbeInterval: time.Second, Isolation: remoteIsolation})
	if ri := reachableRemote(t, front); ri["backend"] != "jupyter" {
		t.Fatalf("front does not see back: %v", ri)
	}
	kerneltest.LockWalkthrough(t)
	out, err := exec.Command("/usr/bin/python3", "../examples/walkthrough.py", front.URL, t.TempDir()).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "count     6.000000\nmean     57.500000\nstd      13.546217") {
		t.Fatalf("walkthrough through aiod → aiod: %v\n%s", err, out)
	}
	_, env, data := front.exec(t, map[string]any{"language": "python", "session_id": "ab", "code": "1/0"})
	if data["status"] != "error" || !strings.Contains(fmt.Sprint(env["message"]), "ZeroDivisionError") {
		t.Fatalf("error through aiod → aiod: %v", env)
	}
	// The front's session is a kernel session on the back, listed by its kernels API.
	st, kernels := back.callRaw(t, "GET", "/api/kernels?token=backtoken")
	if st != 200 || !strings.Contains(kernels, `"id"`) {
		t.Fatalf("back's kernels: %d %s", st, kernels)
	}
	if ts := front.Registry().Get("default", "python", "ab"); ts.Runtime().Info().Backend != "jupyter" {
		t.Fatal("front session is not remote")
	}
}
