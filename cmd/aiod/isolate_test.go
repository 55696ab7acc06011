package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// answer is the part of an execute answer the isolation tests read.
type answer struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
	Data    struct {
		Status       string `json:"status"`
		Stdout       string `json:"stdout"`
		ErrorKind    string `json:"error_kind"`
		FreshRuntime bool   `json:"fresh_runtime"`
		Outputs      []struct {
			Ename  string `json:"ename"`
			Evalue string `json:"evalue"`
		} `json:"outputs"`
	} `json:"data"`
}

func (d *daemon) run(ctx context.Context, lang, sid, code string, timeout float64) answer {
	d.t.Helper()
	var a answer
	d.do(ctx, http.MethodPost, "/v2/code/execute", map[string]any{"language": lang, "session_id": sid, "code": code, "timeout": timeout}, &a)
	return a
}

// TestMemoryBombIsAnsweredAndContained runs two memory bombs (one large
// allocation, one slowly growing list) under --runtime-memory-limit 512M
// while another session prints through a loop: each bomb is answered
// long before its 60 s timeout as a death by the memory limit, the next call gets a fresh
// runtime, the loop's output is complete, and aiod's RSS does not move.
func TestMemoryBombIsAnsweredAndContained(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--runtime-memory-limit", "512M")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d.execute(ctx, "loop", "print('warm')", 30)
	d.execute(ctx, "bomb", "print('warm')", 30)
	rssBefore, err := vmRSS(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	const lines = 60
	var wg sync.WaitGroup
	var loop answer
	wg.Go(func() {
		loop = d.run(ctx, "python", "loop", fmt.Sprintf("import time\nfor i in range(%d):\n    print(i, flush=True)\n    time.sleep(0.05)", lines), 60)
	})
	for _, bomb := range []struct{ name, code string }{
		{"one allocation", "x = bytearray(2 << 30)"},
		{"a growing list", "import time\nx = []\nwhile True:\n    x.append(bytearray(16 << 20))\n    time.sleep(0.01)"},
	} {
		start := time.Now()
		a := d.run(ctx, "python", "bomb", bomb.code, 60)
		took := time.Since(start)
		t.Logf("%s: answered in %v: %s", bomb.name, took.Round(time.Millisecond), a.Message)
		if a.Success || a.Data.Status != "error" || took > 30*time.Second {
			t.Fatalf("%s: success=%v status=%q after %v; want an error well before its 60 s timeout", bomb.name, a.Success, a.Data.Status, took)
		}
		if a.Data.ErrorKind != "out_of_memory" {
			t.Fatalf("%s: error_kind %q, want out_of_memory", bomb.name, a.Data.ErrorKind)
		}
		if !strings.Contains(a.Message, "memory limit (512 MiB (--runtime-memory-limit))") || !strings.Contains(a.Message, "state was lost") {
			t.Fatalf("%s: message %q does not name the memory limit and the loss", bomb.name, a.Message)
		}
		next := d.run(ctx, "python", "bomb", "print('after')", 30)
		if !next.Success || !next.Data.FreshRuntime || next.Data.Stdout != "after\n" {
			t.Fatalf("%s: the next call: success=%v fresh_runtime=%v stdout=%q message=%q", bomb.name, next.Success, next.Data.FreshRuntime, next.Data.Stdout, next.Message)
		}
	}
	wg.Wait()
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if !loop.Success || loop.Data.Stdout != want.String() {
		t.Fatalf("the loop beside the bombs: success=%v message=%q stdout=%q", loop.Success, loop.Message, loop.Data.Stdout)
	}
	rssAfter, err := vmRSS(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("aiod RSS %s before the bombs, %s after", mib(rssBefore), mib(rssAfter))
	if rssAfter > rssBefore+32<<20 {
		t.Fatalf("aiod's RSS grew from %s to %s", mib(rssBefore), mib(rssAfter))
	}
}

// markedCgroup is /proc/PID/cgroup of a process whose command line holds
// marker, or "".
func markedCgroup(marker string) string {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if _, err := strconv.Atoi(e.Name()); err == nil && strings.Contains(string(b), marker) {
			cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
			return e.Name() + ": " + strings.ReplaceAll(string(cg), "\n", " ")
		}
	}
	return ""
}

// countMarked counts the processes whose command line holds marker.
func countMarked(marker string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(b), marker) {
			n++
		}
	}
	return n
}

// TestForkLoopIsContained runs a fork loop in a process group of its own
// under --runtime-pids-limit 64: the session's own fork fails with the
// user's OSError, the session answers and lives on, and deleting the
// session kills the loop: the host's process count returns.
func TestForkLoopIsContained(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--runtime-pids-limit", "64")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Its own marker: another run of this test (the suite beside CI) has
	// a fork loop of its own.
	marker := "aiod_fork_loop_" + strings.ToLower(rand.Text()[:10])
	before := countMarked(marker)
	hostBefore := countMarked("")
	// The cell forks until its fork fails: on a loaded machine the loop
	// can take longer than any fixed pause to fill the limit, and a fork
	// that succeeds here ends its child at once.
	a := d.run(ctx, "python", "forks", `import os, subprocess, sys, time
loop = "`+marker+` = 1\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
subprocess.Popen([sys.executable, "-c", loop], start_new_session=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(0.05)
print("the pids limit was never full")`, 90)
	if a.Success || len(a.Data.Outputs) == 0 {
		t.Fatalf("the session's fork under a full pids limit: success=%v message=%q", a.Success, a.Message)
	}
	// The error is the cell's; stream output of the loop's processes
	// (captured at the kernel's file descriptors) may come after it.
	var failed bool
	for _, o := range a.Data.Outputs {
		failed = failed || o.Ename == "BlockingIOError" && strings.Contains(o.Evalue, "Resource temporarily unavailable")
	}
	if !failed {
		t.Fatalf("want the user's own OSError (BlockingIOError, EAGAIN), got %+v", a.Data.Outputs)
	}
	running := countMarked(marker)
	if running < 30 || running > 64 {
		t.Fatalf("%d fork loop processes run; want up to the limit of 64", running)
	}
	if next := d.run(ctx, "python", "forks", "print('alive')", 30); !next.Success || next.Data.FreshRuntime || next.Data.Stdout != "alive\n" {
		t.Fatalf("the session did not survive: %+v", next)
	}
	var del envelope[map[string]any]
	d.do(ctx, http.MethodDelete, "/v2/code/sessions/forks", nil, &del)
	deadline := time.Now().Add(10 * time.Second)
	for countMarked(marker) > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := countMarked(marker); n > before {
		var warned []string
		for _, l := range strings.Split(d.stderr.String(), "\n") {
			if strings.Contains(l, "cgroup") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				warned = append(warned, l)
			}
		}
		t.Fatalf("%d fork loop processes outlived their session (one in %s); aiod's warnings:\n%s",
			n, markedCgroup(marker), strings.Join(warned, "\n"))
	}
	t.Logf("fork loop processes: %d before, %d running, 0 after the delete; all processes on the host (other tests included): %d before, %d after", before, running, hostBefore, countMarked(""))
}

// TestRuntimesSeeNoSecrets starts aiod with a token, a JWT key, a Jupyter
// token and another variable in its environment: Python and Node sessions
// see none of them (os.environ, process.env, /proc/self/environ), while a
// variable the allow list names passes.
func TestRuntimesSeeNoSecrets(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(pub)
	key := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	d := startDaemonEnv(t, []string{"AIO_TOKEN=tok-sekrit", "JWT_PUBLIC_KEY=" + key, "AIO_JUPYTER_TOKEN=jup-sekrit",
		"UNLISTED_THING=unlisted", "EXTRA_ALLOWED=passes"},
		"--runtime-env-allow", "PATH,HOME,LANG,LC_*,PYTHON*,NODE_*,JUPYTER_*,EXTRA_*")
	d.token = "tok-sekrit"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	py := `import os
env = open("/proc/self/environ", "rb").read().decode()
for k in ["AIO_TOKEN", "JWT_PUBLIC_KEY", "AIO_JUPYTER_TOKEN", "UNLISTED_THING", "EXTRA_ALLOWED"]:
    print(k, os.environ.get(k), k + "=" in env)
print("sekrit" in env, "sekrit" in repr(dict(os.environ)))`
	js := `const env = require('fs').readFileSync('/proc/self/environ', 'utf8');
for (const k of ["AIO_TOKEN", "JWT_PUBLIC_KEY", "AIO_JUPYTER_TOKEN", "UNLISTED_THING", "EXTRA_ALLOWED"])
  console.log(k, process.env[k] === undefined ? "None" : process.env[k], env.includes(k + "=") ? "True" : "False");
console.log(env.includes("sekrit") ? "True" : "False", JSON.stringify(process.env).includes("sekrit") ? "True" : "False");`
	want := "AIO_TOKEN None False\nJWT_PUBLIC_KEY None False\nAIO_JUPYTER_TOKEN None False\nUNLISTED_THING None False\nEXTRA_ALLOWED passes True\nFalse False\n"
	for _, c := range []struct{ lang, sid, code string }{
		{"python", "env", py}, {"python", "", py}, {"javascript", "env", js},
	} {
		a := d.run(ctx, c.lang, c.sid, c.code, 30)
		if !a.Success || a.Data.Stdout != want {
			t.Errorf("%s (session %q): success=%v message=%q\n%s\nwant\n%s", c.lang, c.sid, a.Success, a.Message, a.Data.Stdout, want)
		}
	}
}

// TestRuntimeUserNobody runs runtimes as nobody (the tests run as root):
// a Python and a Node session run as uid 65534, cannot signal aiod, and
// the walkthrough still passes in a folder nobody may write.
func TestRuntimeUserNobody(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (CI runs as root): uid %d", os.Geteuid())
	}
	work, err := os.MkdirTemp("", "aiod-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	if err := os.Chown(work, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	kerneltest.LockWalkthrough(t) // the walkthrough's folder, made for nobody below
	if err := os.Mkdir("/tmp/analysis", 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll("/tmp/analysis")
	if err := os.Chown("/tmp/analysis", 65534, 65534); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--runtime-user", "nobody", "--workdir", work)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	aiod := d.cmd.Process.Pid
	py := d.run(ctx, "python", "who", fmt.Sprintf(`import os
print(os.getuid(), os.getgid(), os.getcwd(), os.access(os.environ["HOME"], os.W_OK))
try:
    os.kill(%d, 0)
except PermissionError as e:
    print("PermissionError")`, aiod), 30)
	if want := fmt.Sprintf("65534 65534 %s True\nPermissionError\n", work); !py.Success || py.Data.Stdout != want {
		t.Fatalf("python as nobody: success=%v message=%q stdout=%q, want %q", py.Success, py.Message, py.Data.Stdout, want)
	}
	js := d.run(ctx, "javascript", "who", fmt.Sprintf(`console.log(process.getuid());
try { process.kill(%d, 0); console.log("signalled") } catch (e) { console.log(e.code) }`, aiod), 30)
	if !js.Success || js.Data.Stdout != "65534\nEPERM\n" {
		t.Fatalf("node as nobody: success=%v message=%q stdout=%q", js.Success, js.Message, js.Data.Stdout)
	}
	var info envelope[struct {
		Isolation struct {
			User *struct {
				Name string `json:"name"`
				UID  int    `json:"uid"`
			} `json:"user"`
		} `json:"isolation"`
	}]
	d.do(ctx, http.MethodGet, "/v2/code/info", nil, &info)
	if u := info.Data.Isolation.User; u == nil || u.Name != "nobody" || u.UID != 65534 {
		t.Fatalf("discovery's isolation.user = %+v", u)
	}
	out, err := exec.CommandContext(ctx, "/usr/bin/python3", "../../examples/walkthrough.py", d.url, t.TempDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("walkthrough with runtimes as nobody: %v\n%s", err, out)
	}
	for _, want := range []string{"mean     57.500000", "('plot.png', ", "('sales.csv', 110)", "\n404\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("walkthrough output lacks %q:\n%s", want, out)
		}
	}
	st, err := os.Stat("/tmp/analysis/plot.png")
	if err != nil {
		t.Fatal(err)
	}
	if owner := st.Sys().(*syscall.Stat_t).Uid; owner != 65534 {
		t.Fatalf("the chart the kernel wrote belongs to uid %d, want nobody's", owner)
	}
}

// TestBadRuntimeLimitFlagsFail: limits and users that cannot work stop
// aiod with exit 2 and one line naming the setting and the value.
func TestBadRuntimeLimitFlagsFail(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--runtime-memory-limit", "10M"}, "less than a runtime needs"},
		{[]string{"--runtime-memory-limit", "lots"}, `"lots"`},
		{[]string{"--runtime-memory-limit", "150%"}, `"150%"`},
		{[]string{"--runtime-pids-limit", "3"}, `"3"`},
		{[]string{"--runtime-cpu-limit", "-1"}, `"-1"`},
		{[]string{"--runtime-user", "no-such-user-here"}, "no such user"},
		{[]string{"--runtime-user", "root"}, "is root"},
	} {
		cmd := exec.Command(daemonBin, append([]string{"--addr", "127.0.0.1:0"}, c.args...)...)
		cmd.Env = ownEnv(t)
		out, err := runBounded(t, cmd, 30*time.Second)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), strings.TrimPrefix(c.args[0], "--")) || !strings.Contains(string(out), c.want) {
			t.Errorf("aiod %s: err %v, want exit 2 naming %s and %q; output:\n%s", strings.Join(c.args, " "), err, c.args[0], c.want, out)
		}
	}
}

func TestParseMemory(t *testing.T) {
	t.Parallel()
	total, err := memTotal()
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]int64{"512M": 512 << 20, "512MiB": 512 << 20, "2G": 2 << 30, "1.5g": 3 << 29,
		"1073741824": 1 << 30, "0": 0, "25%": int64(0.25 * float64(total)), "64k": 64 << 10} {
		if got, err := parseMemory(in); err != nil || got != want {
			t.Errorf("parseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}
