package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestJavaScriptOneShotAndSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	_, env, data := ts.exec(t, map[string]any{"language": "javascript", "code": "console.log([1,2,3].reduce((a,b)=>a+b))"})
	if env["success"] != true || data["stdout"] != "6\n" || data["execution_count"] != 1.0 || data["session_id"] != nil {
		t.Fatalf("one-shot javascript: %v", env)
	}
	ts.exec(t, map[string]any{"language": "javascript", "code": "globalThis.n = 41", "session_id": "s1"})
	_, _, data = ts.exec(t, map[string]any{"language": "javascript", "code": "console.log(n + 1)", "session_id": "s1"})
	if data["stdout"] != "42\n" {
		t.Fatalf("javascript session lost n: %v", data)
	}
	// Python and JavaScript sessions named s1 are two runtimes; DELETE ends both.
	ts.exec(t, map[string]any{"language": "python", "code": "x = 21", "session_id": "s1"})
	_, _, data = ts.exec(t, map[string]any{"language": "python", "code": "print(x * 2)", "session_id": "s1"})
	if data["stdout"] != "42\n" {
		t.Fatalf("python session lost x: %v", data)
	}
	st, env := ts.call(t, "DELETE", "/v2/code/sessions/s1", nil)
	if st != 200 || env["data"].(map[string]any)["closed"] != 2.0 {
		t.Fatalf("delete s1: %d %v", st, env)
	}
	_, env, data = ts.exec(t, map[string]any{"language": "javascript", "code": "throw new TypeError('bad thing')"})
	errOut := outputs(data)
	if data["status"] != "error" || len(errOut) == 0 || errOut[len(errOut)-1]["ename"] != "TypeError" || errOut[len(errOut)-1]["evalue"] != "bad thing" {
		t.Fatalf("thrown error: %v", env)
	}
	// A busy loop past its timeout is interrupted, not restarted: the
	// answer says so and the session answers the next call with its state.
	// (How soon the answer comes is measured in bench/, not asserted here.)
	ts.exec(t, map[string]any{"language": "javascript", "code": "var kept = 7", "session_id": "loop"})
	_, env, data = ts.exec(t, map[string]any{"language": "javascript", "code": "while(true){}", "timeout": 1, "session_id": "loop"})
	if data["status"] != "timeout" || !strings.Contains(fmt.Sprint(env["message"]), "interrupted and the session kept its state") {
		t.Fatalf("busy loop: %v", env)
	}
	if _, _, data = ts.exec(t, map[string]any{"language": "javascript", "code": "kept * 6", "session_id": "loop"}); !strings.Contains(fmt.Sprint(outputs(data)), "42") {
		t.Fatalf("session after the interrupt: %v", data)
	}
}

func TestNativeBackendGivesPlainText(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{CodeBackend: "native"})
	st, env := ts.call(t, "GET", "/v2/sandbox", nil)
	ci := env["data"].(map[string]any)["capabilities"].(map[string]any)["code_interpreter"].(map[string]any)
	if st != 200 || ci["backend"] != "native" {
		t.Fatalf("sandbox: %v", env)
	}
	_, env, data := ts.exec(t, map[string]any{"language": "python", "session_id": "n",
		"code": "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\ndf"})
	outs := outputs(data)
	if env["success"] != true || len(outs) != 1 || outs[0]["output_type"] != "execute_result" {
		t.Fatalf("native DataFrame: %v", env)
	}
	d := outs[0]["data"].(map[string]any)
	if _, html := d["text/html"]; html || !strings.Contains(fmt.Sprint(d["text/plain"]), "a") {
		t.Fatalf("native backend gave %v, want text/plain only", d)
	}
	start := time.Now()
	_, _, data = ts.exec(t, map[string]any{"language": "python", "code": "while True: pass", "timeout": 1, "session_id": "n"})
	if data["status"] != "timeout" {
		t.Fatalf("native busy loop: %v after %s", data, time.Since(start))
	}
	_, _, data = ts.exec(t, map[string]any{"language": "python", "code": "print(len(df))", "session_id": "n"})
	if data["stdout"] != "2\n" {
		t.Fatalf("native session lost df after a timeout: %v", data)
	}
}

func TestMissingNodeAnswers503(t *testing.T) {
	t.Setenv("PATH", "/nonexistent")
	ts := startServer(t, Config{})
	st, env, _ := ts.exec(t, map[string]any{"language": "javascript", "code": "1"})
	if st != 503 || !strings.Contains(fmt.Sprint(env["message"]), "node") {
		t.Fatalf("javascript without node: %d %v", st, env)
	}
	_, _, data := ts.exec(t, map[string]any{"language": "python", "code": "print(1)"})
	if data["stdout"] != "1\n" {
		t.Fatalf("python broke without node: %v", data)
	}
}

// A native REPL that is not ready within --native-start-timeout is
// answered 503, naming the bound and its flag; the session's next call
// starts one again (here with the same bound: refused the same way).
func TestNativeStartTimeoutNamed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{NativeStartTimeout: time.Millisecond})
	for range 2 {
		st, env, _ := ts.exec(t, map[string]any{"language": "bash", "code": "echo 1", "session_id": "slow"})
		msg := fmt.Sprint(env["message"])
		if st != 503 || !strings.Contains(msg, "not ready after") || !strings.Contains(msg, "the bound is --native-start-timeout, 1ms") {
			t.Fatalf("a start past its bound: %d %v", st, env)
		}
	}
}

func TestDiscoveryRoutes(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	_, env := ts.call(t, "GET", "/v2/code/info", nil)
	d := env["data"].(map[string]any)
	if d["backend"] != "kernel" || d["default_timeout"] != 30.0 || d["max_timeout"] != 900.0 ||
		d["kernel_idle_seconds"] != 300.0 || d["native_idle_seconds"] != 1800.0 {
		t.Fatalf("code info: %v", d)
	}
	for _, l := range d["languages"].([]any) {
		li := l.(map[string]any)
		if li["available"] != true || li["version"] == "" {
			t.Fatalf("language %v", li)
		}
	}
	_, env = ts.call(t, "GET", "/v1/capabilities", nil)
	ci := env["data"].(map[string]any)["code_interpreter"].(map[string]any)
	if ci["backend"] != "kernel" || len(ci["python_kernels"].([]any)) == 0 {
		t.Fatalf("capabilities: %v", ci)
	}
}

func TestKernelPinWithoutKernelspecAnswers503(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{CodeBackend: "kernel", KernelName: "no-such-kernel"})
	st, env, _ := ts.exec(t, map[string]any{"language": "python", "code": "print(1)"})
	msg := fmt.Sprint(env["message"])
	if st != 503 || !strings.Contains(msg, "ipykernel") || !strings.Contains(msg, "apt-get install python3-ipykernel") {
		t.Fatalf("kernel pin without a kernelspec: %d %v", st, env)
	}
	// JavaScript is unaffected.
	if _, _, data := ts.exec(t, map[string]any{"language": "javascript", "code": "console.log(1)"}); data["stdout"] != "1\n" {
		t.Fatalf("javascript: %v", data)
	}
}
