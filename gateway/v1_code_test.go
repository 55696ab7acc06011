package gateway

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func TestV1CodeExecute(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	exec := func(body map[string]any) v1Reply {
		t.Helper()
		return ts.sdkOK(t, "POST", "v1/code/execute", body)
	}

	// An exception: status error, success false, traceback a list of str.
	r := exec(map[string]any{"language": "python", "code": "1/0"})
	d := r.data()
	tb, _ := d["traceback"].([]any)
	if d["status"] != "error" || r.Body["success"] != false || d["exit_code"] != 1.0 || len(tb) == 0 ||
		!strings.Contains(fmt.Sprint(tb), "ZeroDivisionError") || d["stdout"] != nil {
		t.Fatalf("python error: %s", r.Raw)
	}
	r = exec(map[string]any{"language": "javascript", "code": "throw new TypeError('bad')"})
	if r.data()["status"] != "error" || r.data()["traceback"] == nil {
		t.Fatalf("javascript error: %s", r.Raw)
	}

	// Timeout: status timeout, exit_code 124, still HTTP 200.
	start := time.Now()
	r = exec(map[string]any{"language": "python", "code": "import time\ntime.sleep(30)", "timeout": 1})
	if r.data()["status"] != "timeout" || r.data()["exit_code"] != 124.0 {
		t.Fatalf("timeout: %s after %s", r.Raw, time.Since(start))
	}

	// Every optional field as null means the default: a one-shot call.
	r = exec(map[string]any{"language": "python", "code": "print('n')", "timeout": nil, "cwd": nil, "stateful": nil, "session_id": nil})
	if r.data()["stdout"] != "n\n" || r.data()["session_id"] != nil {
		t.Fatalf("nulls: %s", r.Raw)
	}
	// stateful without session_id: a new session, whose id is returned.
	r = exec(map[string]any{"language": "python", "code": "y = 5", "stateful": true})
	sid, _ := r.data()["session_id"].(string)
	if sid == "" || ts.Registry().Get("default", "python", sid) == nil {
		t.Fatalf("stateful without session_id: %s", r.Raw)
	}
	r = exec(map[string]any{"language": "python", "code": "print(y)", "session_id": sid, "stateful": false})
	if r.data()["stdout"] != "5\n" {
		t.Fatalf("a session_id means stateful even with stateful false: %s", r.Raw)
	}
	// An empty session_id is a one-shot call.
	r = exec(map[string]any{"language": "python", "code": "print(1)", "session_id": ""})
	if r.data()["session_id"] != nil {
		t.Fatalf("empty session_id: %s", r.Raw)
	}

	// cwd: one-shot and session, both languages.
	dir := ts.viewDir(t, "default")
	r = exec(map[string]any{"language": "python", "code": "import os; print(os.getcwd())", "cwd": dir})
	if r.data()["stdout"] != dir+"\n" || r.data()["execution_count"] != 1.0 {
		t.Fatalf("python cwd: %s", r.Raw)
	}
	r = exec(map[string]any{"language": "javascript", "code": "console.log(process.cwd())", "cwd": dir})
	if r.data()["stdout"] != dir+"\n" {
		t.Fatalf("javascript cwd: %s", r.Raw)
	}
	r = exec(map[string]any{"language": "python", "code": "import os; print(os.getcwd())", "cwd": dir, "session_id": "cw"})
	if r.data()["stdout"] != dir+"\n" || r.data()["execution_count"] != 1.0 {
		t.Fatalf("python session cwd: %s", r.Raw)
	}
	other := ts.viewDir(t, "default")
	r = exec(map[string]any{"language": "python", "code": "print(os.getcwd())", "cwd": other, "session_id": "cw"})
	if r.data()["stdout"] != other+"\n" {
		t.Fatalf("python session, new cwd: %s", r.Raw)
	}

	// 422s in FastAPI's shape.
	ts.sdk422(t, "POST", "v1/code/execute", map[string]any{"language": "python"}, "body", "code")
	ts.sdk422(t, "POST", "v1/code/execute", map[string]any{"code": "1"}, "body", "language")
	ts.sdk422(t, "POST", "v1/code/execute", map[string]any{"language": "ruby", "code": "1"}, "body", "language")
	ts.sdk422(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": "1", "timeout": 1.5}, "body", "timeout")
	ts.sdk422(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": "1", "timeout": 0}, "body", "timeout")
	ts.sdk422(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": "1", "timeout": 901}, "body", "timeout")
	ts.sdk422(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": 5}, "body", "code")
	ts.sdk422(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": "1", "cwd": "/nonexistent/x"}, "body", "cwd")
	ts.sdk422(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": "1", "session_id": "a/b"}, "body", "session_id")
	ts.sdk422(t, "POST", "v1/code/execute", nil, "body", "language")
	// The largest timeout aiod allows is accepted.
	exec(map[string]any{"language": "python", "code": "1", "timeout": 900})

	// code/info: both languages, aiod's limits.
	info := ts.sdkOK(t, "GET", "v1/code/info", nil)
	langs := info.data()["languages"].([]any)
	if len(langs) != 2 {
		t.Fatalf("code info: %s", info.Raw)
	}
	for _, l := range langs {
		li := l.(map[string]any)
		if li["default_timeout"] != 30.0 || li["max_timeout"] != 900.0 || li["runtime_version"] == nil {
			t.Fatalf("code info language: %v", li)
		}
	}
}

func TestV1Jupyter(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	// No sessions: an empty object, never [] or null.
	s := ts.sdkOK(t, "GET", "v1/jupyter/sessions", nil)
	if m, ok := s.data()["sessions"].(map[string]any); !ok || len(m) != 0 {
		t.Fatalf("empty sessions: %s", s.Raw)
	}
	info := ts.sdkOK(t, "GET", "v1/jupyter/info", nil)
	if info.data()["session_timeout_seconds"] != 300.0 || info.data()["default_kernel"] != "python3" ||
		!strings.Contains(fmt.Sprint(info.data()["available_kernels"]), "python3.11") {
		t.Fatalf("jupyter info: %s", info.Raw)
	}

	exec := func(body map[string]any) v1Reply {
		t.Helper()
		return ts.sdkOK(t, "POST", "v1/jupyter/execute", body)
	}
	// An unknown session_id creates the session; the docs' aliases work.
	r := exec(map[string]any{"code": "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\ndf", "session_id": "analysis", "kernel_name": "python3.12"})
	o := v1Outs(r.data())
	if r.data()["kernel_name"] != "python3.12" || r.data()["session_id"] != "analysis" || len(o) != 1 ||
		o[0]["output_type"] != "execute_result" || o[0]["execution_count"] != 1.0 || r.data()["msg_id"] == "" {
		t.Fatalf("execute_result: %s", r.Raw)
	}
	data := o[0]["data"].(map[string]any)
	if _, ok := data["text/html"]; !ok || len(o[0]) != 9 {
		t.Fatalf("DataFrame: want text/html and the nine fields: %v", o[0])
	}
	r = exec(map[string]any{"code": "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()", "session_id": "analysis", "timeout": 120})
	var png bool
	for _, x := range v1Outs(r.data()) {
		if x["output_type"] == "display_data" {
			d := x["data"].(map[string]any)
			s, _ := d["image/png"].(string)
			png = strings.HasPrefix(s, "iVBOR")
		}
	}
	if !png {
		t.Fatalf("display_data with a bare base64 PNG: %s", r.Raw)
	}
	r = exec(map[string]any{"code": "print('a'); raise ValueError('v')", "session_id": "analysis"})
	o = v1Outs(r.data())
	if r.data()["status"] != "error" || len(o) != 2 || o[0]["text"] != "a\n" || o[1]["ename"] != "ValueError" || o[1]["evalue"] != "v" {
		t.Fatalf("error: %s", r.Raw)
	}
	// Empty code and no outputs: outputs is [] (never null).
	r = exec(map[string]any{"code": "", "session_id": "analysis"})
	if l, ok := r.data()["outputs"].([]any); !ok || len(l) != 0 {
		t.Fatalf("no outputs: %s", r.Raw)
	}
	// Timeout in a session: interrupted, state kept.
	r = exec(map[string]any{"code": "import time\nwhile True: time.sleep(0.05)", "session_id": "analysis", "timeout": 1})
	if r.data()["status"] != "timeout" {
		t.Fatalf("timeout: %s", r.Raw)
	}
	r = exec(map[string]any{"code": "print(len(df))", "session_id": "analysis"})
	if v1Outs(r.data())[0]["text"] != "2\n" {
		t.Fatalf("state after timeout: %s", r.Raw)
	}
	// One-shot (no session): a fresh kernel, session_id null.
	r = exec(map[string]any{"code": "print('x' in dir())", "session_id": nil, "kernel_name": nil, "timeout": nil, "cwd": nil})
	if v1Outs(r.data())[0]["text"] != "False\n" || r.data()["session_id"] != nil {
		t.Fatalf("one-shot: %s", r.Raw)
	}
	// cwd
	dir := ts.viewDir(t, "default")
	r = exec(map[string]any{"code": "import os; print(os.getcwd())", "cwd": dir, "session_id": "cwd"})
	if v1Outs(r.data())[0]["text"] != dir+"\n" || r.data()["execution_count"] != 1.0 {
		t.Fatalf("cwd: %s", r.Raw)
	}

	// create_session with a body, with nulls, and an existing id.
	c := ts.sdkOK(t, "POST", "v1/jupyter/sessions/create", map[string]any{"session_id": "made", "kernel_name": nil, "cwd": dir})
	if c.data()["session_id"] != "made" || c.data()["message"] == "" {
		t.Fatalf("create: %s", c.Raw)
	}
	sess := ts.Registry().Get("default", "python", "made")
	if sess == nil || sess.Runtime() == nil {
		t.Fatal("create_session did not start the kernel")
	}
	ts.sdkOK(t, "POST", "v1/jupyter/sessions/create", map[string]any{"session_id": "made"})
	r = exec(map[string]any{"code": "import os; print(os.getcwd())", "session_id": "made"})
	if v1Outs(r.data())[0]["text"] != dir+"\n" || r.data()["execution_count"] != 1.0 {
		t.Fatalf("created session: %s", r.Raw)
	}
	ts.sdk422(t, "POST", "v1/jupyter/sessions/create", map[string]any{"kernel_name": "ruby"}, "body", "kernel_name")
	ts.sdk422(t, "POST", "v1/jupyter/execute", map[string]any{"code": "1", "kernel_name": "python2"}, "body", "kernel_name")
	ts.sdk422(t, "POST", "v1/jupyter/execute", map[string]any{"kernel_name": "python3"}, "body", "code")
	ts.sdk422(t, "POST", "v1/jupyter/execute", map[string]any{"code": "1", "timeout": "soon"}, "body", "timeout")
	ts.sdk422(t, "DELETE", "v1/jupyter/sessions/a%20b", nil, "path", "session_id")

	// Listing: an object keyed by id, integral age_seconds.
	s = ts.sdkOK(t, "GET", "v1/jupyter/sessions", nil)
	m := s.data()["sessions"].(map[string]any)
	for _, id := range []string{"analysis", "cwd", "made"} {
		if _, ok := m[id]; !ok {
			t.Fatalf("sessions lacks %s: %s", id, s.Raw)
		}
	}
	if m["analysis"].(map[string]any)["kernel_name"] != "python3.12" {
		t.Fatalf("kernel_name of a session: %s", s.Raw)
	}
	lu := m["made"].(map[string]any)["last_used"].(float64)
	if d := time.Since(time.Unix(int64(lu), 0)); d < 0 || d > time.Minute {
		t.Fatalf("last_used %v is not epoch seconds", lu)
	}
	info = ts.sdkOK(t, "GET", "v1/jupyter/info", nil)
	if info.data()["active_sessions"] != 3.0 {
		t.Fatalf("active_sessions: %s", info.Raw)
	}

	// Delete one, then all; a JavaScript session survives DELETE all.
	ts.sdkOK(t, "POST", "v1/nodejs/execute", map[string]any{"code": "1", "session_id": "js"})
	ts.sdkOK(t, "DELETE", "v1/jupyter/sessions/cwd", nil)
	ts.sdkStatus(t, "DELETE", "v1/jupyter/sessions/cwd", nil, http.StatusNotFound)
	all := ts.sdkOK(t, "DELETE", "v1/jupyter/sessions", nil)
	if all.data()["count"] != 2.0 || ts.Registry().Get("default", "javascript", "js") == nil {
		t.Fatalf("delete all: %s", all.Raw)
	}
	s = ts.sdkOK(t, "GET", "v1/jupyter/sessions", nil)
	if len(s.data()["sessions"].(map[string]any)) != 0 {
		t.Fatalf("after delete all: %s", s.Raw)
	}
	all = ts.sdkOK(t, "DELETE", "v1/jupyter/sessions", nil)
	if all.data()["count"] != 0.0 {
		t.Fatalf("delete all with none: %s", all.Raw)
	}
}

// TestV1JupyterOnNativeBackend: /v1/jupyter uses a kernel whatever
// AIO_CODE_BACKEND says; an id already taken by a native Python session is
// a conflict.
func TestV1JupyterOnNativeBackend(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{CodeBackend: "native"})
	r := ts.sdkOK(t, "POST", "v1/jupyter/execute", map[string]any{"code": "import pandas as pd\npd.DataFrame({'a': [1]})", "session_id": "k"})
	d := v1Outs(r.data())[0]["data"].(map[string]any)
	if _, ok := d["text/html"]; !ok || ts.Registry().Get("default", "python", "k").Backend.Name != "kernel" {
		t.Fatalf("jupyter on the native backend did not use a kernel: %s", r.Raw)
	}
	// The code route keeps using the kernel session it finds under that id.
	c := ts.sdkOK(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": "print(type(pd).__name__)", "session_id": "k"})
	if c.data()["stdout"] != "module\n" {
		t.Fatalf("code route on a kernel session: %s", c.Raw)
	}
	ts.sdkOK(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": "z = 1", "session_id": "n"})
	if ts.Registry().Get("default", "python", "n").Backend.Name != "native" {
		t.Fatal("the code route did not use the native backend")
	}
	x := ts.sdkStatus(t, "POST", "v1/jupyter/execute", map[string]any{"code": "print(z)", "session_id": "n"}, http.StatusConflict)
	if !strings.Contains(fmt.Sprint(x.Body["message"]), "native") {
		t.Fatalf("conflict message: %s", x.Raw)
	}
	s := ts.sdkOK(t, "GET", "v1/jupyter/sessions", nil)
	if m := s.data()["sessions"].(map[string]any); len(m) != 1 || m["k"] == nil {
		t.Fatalf("jupyter sessions list native sessions: %s", s.Raw)
	}
	ts.sdkStatus(t, "DELETE", "v1/jupyter/sessions/n", nil, http.StatusNotFound)
}

// TestV1JupyterWithoutKernel: no kernelspec → 503 on the jupyter routes,
// and the info route still answers its model.
func TestV1JupyterWithoutKernel(t *testing.T) {
	// A python3 kernelspec that is not ipykernel hides the host's.
	jp := t.TempDir()
	if err := os.MkdirAll(jp+"/kernels/python3", 0o755); err != nil {
		t.Fatal(err)
	}
	spec := `{"argv": ["/bin/false", "{connection_file}"], "display_name": "fake", "language": "python"}`
	if err := os.WriteFile(jp+"/kernels/python3/kernel.json", []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JUPYTER_PATH", jp)
	ts := startServer(t, Config{CodeBackend: "native"})
	if ts.Environment().PythonKernel != nil {
		t.Fatalf("a kernel was found: %+v", ts.Environment().PythonKernel)
	}
	r := ts.sdkStatus(t, "POST", "v1/jupyter/execute", map[string]any{"code": "1"}, http.StatusServiceUnavailable)
	if !strings.Contains(fmt.Sprint(r.Body["message"]), "ipykernel") {
		t.Fatalf("503 message: %s", r.Raw)
	}
	ts.sdkStatus(t, "POST", "v1/jupyter/sessions/create", nil, http.StatusServiceUnavailable)
	ts.sdkOK(t, "GET", "v1/jupyter/info", nil)
}
