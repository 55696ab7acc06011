package gateway

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/kerneltest"
)

func outputs(data map[string]any) []map[string]any {
	raw, _ := data["outputs"].([]any)
	out := make([]map[string]any, len(raw))
	for i, o := range raw {
		out[i], _ = o.(map[string]any)
	}
	return out
}

func TestWalkthroughScriptRunsUnchanged(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	out := t.TempDir()
	kerneltest.LockWalkthrough(t)
	cmd := exec.Command("/usr/bin/python3", "../examples/walkthrough.py", ts.URL, out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("walkthrough failed: %v\n%s", err, b)
	}
	text := string(b)
	if !strings.HasPrefix(text, "count     6.000000\nmean     57.500000\nstd      13.546217") {
		t.Fatalf("step 2 output does not begin as the page says:\n%s", text)
	}
	for _, want := range []string{"('plot.png', ", "('sales.csv', 110)", `attachment; filename="plot.png"`, "\n404\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("walkthrough output lacks %q:\n%s", want, text)
		}
	}
	png, err := os.ReadFile(filepath.Join(out, "margin.png"))
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
		t.Fatalf("downloaded chart is not a PNG (%v)", err)
	}
}

func TestOneShotMatchesThePageSample(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	st, env, data := ts.exec(t, map[string]any{"language": "python", "code": "print(sum([1,2,3]))"})
	if st != 200 || env["success"] != true || env["message"] != "ok" {
		t.Fatalf("status %d envelope %v", st, env)
	}
	// The page's sample, and the execution's id, which every answer carries.
	if id, _ := data["execution_id"].(string); !jUUIDRE.MatchString(id) {
		t.Fatalf("execution_id %v is not a UUID", data["execution_id"])
	}
	delete(data, "execution_id")
	// queued_ms is there only when the call waited for its turn (a loaded
	// machine's millisecond before the one-shot runtime took it).
	if q, ok := data["queued_ms"].(float64); ok && q >= 0 {
		delete(data, "queued_ms")
	}
	want := `{"code":"print(sum([1,2,3]))","execution_count":1,"exit_code":0,"language":"python",` +
		`"outputs":[{"name":"stdout","output_type":"stream","text":"6\n"}],"session_id":null,"status":"ok","stderr":"","stdout":"6\n"}`
	got, _ := json.Marshal(data) // map keys sorted
	if string(got) != want {
		t.Fatalf("data =\n%s\nwant\n%s", got, want)
	}
	// Nothing survives between one-shot calls.
	ts.exec(t, map[string]any{"language": "python", "code": "leak = 1"})
	_, env, data = ts.exec(t, map[string]any{"language": "python", "code": "print(leak)"})
	if env["success"] != false || data["status"] != "error" {
		t.Fatalf("a one-shot call saw an earlier call's variable: %v", data)
	}
}

func TestRichOutputs(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	sid := map[string]any{"language": "python", "session_id": "rich"}
	with := func(code string) map[string]any {
		b := map[string]any{"code": code}
		for k, v := range sid {
			b[k] = v
		}
		st, env, data := ts.exec(t, b)
		if st != 200 || env["success"] != true {
			t.Fatalf("%q: status %d %v", code, st, env)
		}
		return data
	}
	with("import pandas as pd\ndf = pd.DataFrame({'month':['2026-01','2026-02','2026-03','2026-04'],'revenue':[120,135,150,142]})")
	outs := outputs(with("df.head(3)"))
	if len(outs) != 1 || outs[0]["output_type"] != "execute_result" {
		t.Fatalf("df.head(3) outputs = %v", outs)
	}
	d, _ := outs[0]["data"].(map[string]any)
	if !strings.Contains(fmt.Sprint(d["text/html"]), `<table border="1" class="dataframe">`) || d["text/plain"] == nil {
		t.Fatalf("execute_result data = %v", d)
	}
	if _, ok := outs[0]["execution_count"].(float64); !ok {
		t.Fatalf("execute_result lacks execution_count: %v", outs[0])
	}
	outs = outputs(with("%matplotlib inline\nimport matplotlib.pyplot as plt\ndf.plot(x='month', y='revenue', figsize=(6, 3))\nplt.show()"))
	var disp map[string]any
	for _, o := range outs {
		if o["output_type"] == "display_data" {
			disp = o
		}
	}
	if disp == nil {
		t.Fatalf("no display_data in %v", outs)
	}
	dd, _ := disp["data"].(map[string]any)
	png, _ := dd["image/png"].(string)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(png))
	if err != nil || !strings.HasPrefix(string(raw), "\x89PNG") || strings.HasPrefix(png, "data:") {
		t.Fatalf("image/png is not bare base64 of a PNG (err %v, prefix %.30q)", err, png)
	}
	if dd["text/plain"] != "<Figure size 600x300 with 1 Axes>" {
		t.Fatalf("text/plain = %v", dd["text/plain"])
	}
}

func TestErrorAndTimeoutKeepSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	st, env, data := ts.exec(t, map[string]any{"language": "python", "code": "x = 41\n1/0", "session_id": "s"})
	if st != 200 || env["success"] != false || data["status"] != "error" {
		t.Fatalf("1/0: %d %v", st, env)
	}
	var errOut map[string]any
	for _, o := range outputs(data) {
		if o["output_type"] == "error" {
			errOut = o
		}
	}
	if errOut == nil || errOut["ename"] != "ZeroDivisionError" || errOut["evalue"] != "division by zero" {
		t.Fatalf("error output = %v", errOut)
	}
	tb, _ := errOut["traceback"].([]any)
	for _, l := range tb {
		if s, ok := l.(string); !ok || strings.Contains(s, "\x1b") {
			t.Fatalf("traceback line %q is not plain text", l)
		}
	}
	if !strings.Contains(fmt.Sprint(env["message"]), "ZeroDivisionError") {
		t.Errorf("message %q does not name the error", env["message"])
	}

	start := time.Now()
	_, env, data = ts.exec(t, map[string]any{"language": "python", "code": "while True: pass", "session_id": "s", "timeout": 1})
	took := time.Since(start)
	if data["status"] != "timeout" || env["success"] != false {
		t.Fatalf("busy loop: %v after %s", env, took)
	}
	_, _, data = ts.exec(t, map[string]any{"language": "python", "code": "print(x + 1)", "session_id": "s"})
	if data["stdout"] != "42\n" {
		t.Fatalf("session lost its state after a timeout: %v", data)
	}
}

func TestKernelKilledMidRun(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	ts.exec(t, map[string]any{"language": "python", "code": "import os; x = 1", "session_id": "k"})
	pid := ts.Registry().Get("default", "python", "k").Runtime().Info().PID
	answered := make(chan [2]map[string]any, 1)
	go func() {
		_, env, data := ts.exec(t, map[string]any{"language": "python", "code": "import time\nprint('started', flush=True)\ntime.sleep(30)", "session_id": "k", "execution_id": "k-run"})
		answered <- [2]map[string]any{env, data}
	}()
	waitOutput(t, ts, "k-run", "started")
	_ = syscall.Kill(pid, syscall.SIGKILL)
	a := <-answered
	env, data := a[0], a[1]
	if data["status"] != "error" || !strings.Contains(fmt.Sprint(env["message"]), "died") || !strings.Contains(fmt.Sprint(env["message"]), "SIGKILL") {
		t.Fatalf("kill -9 mid-run: %v", env)
	}
	_, env, data = ts.exec(t, map[string]any{"language": "python", "code": "print('x' in dir())", "session_id": "k"})
	if data["stdout"] != "False\n" || data["fresh_runtime"] != true || !strings.Contains(fmt.Sprint(env["message"]), "fresh kernel") {
		t.Fatalf("next call did not say it ran in a fresh kernel: %v", env)
	}
	// os._exit inside user code: the same story.
	_, env, data = ts.exec(t, map[string]any{"language": "python", "code": "import os; os._exit(3)", "session_id": "k"})
	if data["status"] != "error" || !strings.Contains(fmt.Sprint(env["message"]), "died") {
		t.Fatalf("os._exit: %v", env)
	}
}

func TestHundredMegabytePrintIsCapped(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	code := "import sys\nline = 'y' * 1023 + '\\n'\nfor i in range(100 * 1024):\n    sys.stdout.write(line)\nprint('THE END')"
	_, env, data := ts.exec(t, map[string]any{"language": "python", "code": code, "timeout": 300})
	if data["status"] != "ok" || data["truncated"] != true {
		t.Fatalf("100 MB print: status %v truncated %v message %v", data["status"], data["truncated"], env["message"])
	}
	if !strings.Contains(fmt.Sprint(env["message"]), "8 MiB") {
		t.Errorf("message does not name the limit: %v", env["message"])
	}
	stdout, _ := data["stdout"].(string)
	for what, bad := range map[string]bool{
		"over 10 MiB kept":     len(stdout) > 10<<20,
		"tail lacks THE END":   !strings.HasSuffix(stdout, "THE END\n"),
		"head is not the loop": !strings.HasPrefix(stdout, "yyyy"),
		"no truncation note":   !strings.Contains(stdout, "omitted"),
		"NUL bytes":            strings.Contains(stdout, "\x00"),
	} {
		if bad {
			t.Errorf("stdout (%d bytes): %s; ends %q", len(stdout), what, stdout[max(0, len(stdout)-80):])
		}
	}
	// The daemon's resident memory during the flood is measured on the real
	// binary, in cmd/aiod's tests.
}

func TestFiftyConcurrentSessionsKeepTheirOutputs(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{KernelStartTimeout: 300 * time.Second})
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := fmt.Sprintf("c%02d", i)
			code := fmt.Sprintf("import time, sys\nfor j in range(20):\n    print('%s', j, flush=True)\n    print('%s-err', file=sys.stderr, flush=True)\n    time.sleep(0.01)", sid, sid)
			_, env, data := ts.exec(t, map[string]any{"language": "python", "code": code, "session_id": sid, "timeout": 300})
			var want strings.Builder
			for j := 0; j < 20; j++ {
				fmt.Fprintf(&want, "%s %d\n", sid, j)
			}
			if data["stdout"] != want.String() || data["stderr"] != strings.Repeat(sid+"-err\n", 20) {
				errs <- fmt.Errorf("session %s got stdout %q stderr %q (%v)", sid, data["stdout"], data["stderr"], env["message"])
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
