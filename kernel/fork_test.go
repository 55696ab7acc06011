package kernel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/goccy/go-json"
	"golang.org/x/sys/unix"
)

// shared is the template set the fork tests share (one template process
// for the package's run); tests that kill a template make their own.
var shared struct {
	once sync.Once
	ts   *Templates
	err  error
}

func sharedTemplates(t testing.TB) *Templates {
	t.Helper()
	kerneltest.SkipShort(t, "a kernel template")
	shared.once.Do(func() {
		shared.ts, shared.err = NewTemplates(TemplateConfig{Preload: DefaultPreload, Logger: testLogger()})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.ts
}

// closeSharedTemplates is called by TestMain before the leak checks.
func closeSharedTemplates() {
	if shared.ts != nil {
		shared.ts.Close(context.Background())
	}
}

// forked sets Options for a kernel forked from ts.
func forked(ts *Templates, more ...func(*Options)) func(*Options) {
	return func(o *Options) {
		o.Templates = ts
		for _, m := range more {
			m(o)
		}
	}
}

// startForkedKernel starts a kernel from ts and checks it was forked.
func startForkedKernel(t testing.TB, ts *Templates, more ...func(*Options)) (*Kernel, *recorder) {
	t.Helper()
	templateUp(t, ts, more...)
	k, rec := startKernel(t, forked(ts, more...))
	if k.StartMode() != StartFork {
		t.Fatalf("kernel started by %s, want fork; templates: %+v", k.StartMode(), ts.Stats())
	}
	return k, rec
}

// templateUp waits until the template of the kernels that ts and more
// start is up: a start waits for a template's first readiness only so long
// (firstWait) before it spawns, and a loaded machine can take longer to
// import pandas.
func templateUp(t testing.TB, ts *Templates, more ...func(*Options)) {
	t.Helper()
	spec, err := DefaultPythonSpec()
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Spec: spec}
	forked(ts, more...)(&opts)
	if ts.template(opts.Spec) == nil {
		t.Fatalf("no template for %v", opts.Spec.Argv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := ts.AwaitFirst(ctx, opts.Spec); err != nil {
		t.Fatalf("the template was not up within 3 minutes: %+v", ts.Stats())
	}
}

// startForkedKernels starts n forked kernels at once.
func startForkedKernels(t *testing.T, ts *Templates, n int) ([]*Kernel, []*recorder) {
	t.Helper()
	templateUp(t, ts)
	ks, recs := make([]*Kernel, n), make([]*recorder, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			if ks[i], recs[i], err = tryStartKernel(t, forked(ts)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, k := range ks {
		if k.StartMode() != StartFork {
			t.Fatalf("kernel %d started by %s, want fork; templates: %+v", k.Info().PID, k.StartMode(), ts.Stats())
		}
	}
	return ks, recs
}

// runJSON runs code that prints one JSON value and decodes it into out.
func runJSON(t testing.TB, k *Kernel, rec *recorder, code string, out any) {
	t.Helper()
	ms := run(t, k, rec, code)
	text := stdout(ms)
	if err := json.Unmarshal([]byte(text), out); err != nil {
		t.Fatalf("decode %q: %v (messages %s, stderr %q)", text, err, kerneltest.Summary(ms), kerneltest.StreamText(ms, "stderr"))
	}
}

// TestForkedKernelsAreDistinct forks 8 kernels at once and checks every
// source of randomness differs between them, and that each has its own pid,
// argv, and an empty history.
func TestForkedKernelsAreDistinct(t *testing.T) {
	t.Parallel()
	ts := sharedTemplates(t)
	ks, recs := startForkedKernels(t, ts, 8)
	type facts struct {
		Random  float64  `json:"random"`
		NumPy   float64  `json:"numpy"`
		UUID    string   `json:"uuid"`
		URandom string   `json:"urandom"`
		PID     int      `json:"pid"`
		Argv    []string `json:"argv"`
		History []string `json:"history"`
		Seq     []int    `json:"seq"`
	}
	const code = `import json, os, random, sys, uuid
import numpy
print(json.dumps({"random": random.random(), "numpy": float(numpy.random.rand()),
    "uuid": str(uuid.uuid4()), "urandom": os.urandom(8).hex(), "pid": os.getpid(),
    "argv": sys.argv, "history": In[:-1], "seq": [random.randrange(1 << 30) for _ in range(4)]}))`
	seen := map[string]map[string]int{"random": {}, "numpy": {}, "uuid": {}, "urandom": {}, "seq": {}}
	for i, k := range ks {
		var f facts
		runJSON(t, k, recs[i], code, &f)
		for what, v := range map[string]string{
			"random": fmt.Sprint(f.Random), "numpy": fmt.Sprint(f.NumPy), "uuid": f.UUID,
			"urandom": f.URandom, "seq": fmt.Sprint(f.Seq),
		} {
			if j, dup := seen[what][v]; dup {
				t.Errorf("kernels %d and %d drew the same %s: %s", j, i, what, v)
			}
			seen[what][v] = i
		}
		if f.PID != k.Info().PID {
			t.Errorf("kernel %d: os.getpid() = %d, aiod knows pid %d", i, f.PID, k.Info().PID)
		}
		wantArgv := []string{"-f", k.connDir + "/kernel.json", "--HistoryManager.hist_file=:memory:"}
		if len(f.Argv) != 4 || filepath.Base(f.Argv[0]) != "ipykernel_launcher.py" || !slices.Equal(f.Argv[1:], wantArgv) {
			t.Errorf("kernel %d: sys.argv = %q, want [.../ipykernel_launcher.py %q...]", i, f.Argv, wantArgv)
		}
		if !slices.Equal(f.History, []string{""}) {
			t.Errorf("kernel %d: history before the first cell = %q, want none", i, f.History)
		}
	}
}

// TestForkedKernelStartsFresh checks that nothing one forked kernel did is
// seen by the next one forked: variables, imports, open files, cwd.
func TestForkedKernelStartsFresh(t *testing.T) {
	t.Parallel()
	ts := sharedTemplates(t)
	a, recA := startForkedKernel(t, ts)
	run(t, a, recA, "leaked = 42\nimport wave, os\nf = open('/proc/self/status')\nos.chdir('/tmp')")
	b, recB := startForkedKernel(t, ts)
	var got struct {
		Leaked bool     `json:"leaked"`
		Wave   bool     `json:"wave"`
		Files  []string `json:"files"`
		Cwd    string   `json:"cwd"`
		Names  []string `json:"names"`
		Out    int      `json:"out"`
	}
	runJSON(t, b, recB, `import json, os, sys
_names = sorted(n for n in globals() if not n.startswith('_'))
files = []
for fd in os.listdir('/proc/self/fd'):
    try:
        files.append(os.readlink('/proc/self/fd/' + fd))
    except OSError:
        pass
print(json.dumps({"leaked": "leaked" in globals(), "wave": "wave" in sys.modules,
    "files": [f for f in files if f.startswith('/proc')], "cwd": os.getcwd(),
    "names": _names, "out": len(Out)}))`, &got)
	wd, _ := os.Getwd()
	if got.Leaked || got.Wave || len(got.Files) > 0 || got.Cwd != wd || got.Out != 0 {
		t.Errorf("second kernel saw the first one's state: %+v (cwd want %s)", got, wd)
	}

	// Its user namespace holds exactly what a spawned kernel's holds.
	s, recS := startKernel(t, nil)
	var spawned struct {
		Names []string `json:"names"`
	}
	runJSON(t, s, recS, `import json, os, sys
print(json.dumps({"names": sorted(n for n in globals() if not n.startswith('_'))}))`, &spawned)
	if !slices.Equal(got.Names, spawned.Names) {
		t.Errorf("forked namespace %q, spawned %q", got.Names, spawned.Names)
	}
}

// TestForkedKernelTakesTheTemplatesModuleNames checks a forked kernel's
// note of the modules it started with (what %reset --aggressive keeps) is
// the one its template made before it forked, not one the child built by
// taking a reference to every module name (which copies some 900 of the
// template's pages), and that %reset --aggressive still drops just what
// the session imported.
func TestForkedKernelTakesTheTemplatesModuleNames(t *testing.T) {
	t.Parallel()
	ts := sharedTemplates(t)
	k, rec := startForkedKernel(t, ts)
	var got struct {
		Noted    bool `json:"noted"`
		Same     bool `json:"same"`
		Imported bool `json:"imported"`
	}
	runJSON(t, k, rec, `import json, sys
from ipykernel.kernelapp import IPKernelApp
noted = get_ipython()._sys_modules_keys
app_globals = getattr(IPKernelApp.instance().init_code, "__globals__", {})
print(json.dumps({"noted": noted is app_globals.get("MODULE_NAMES"), "same": noted == set(sys.modules),
    "imported": "wave" in sys.modules}))`, &got)
	if !got.Noted || !got.Same || got.Imported {
		t.Fatalf("the kernel's module names: the template's %v, the modules it started with %v; wave already imported %v", got.Noted, got.Same, got.Imported)
	}
	run(t, k, rec, "import wave\n%reset -f --aggressive")
	var after struct {
		Colorsys bool `json:"wave"`
		Kept     bool `json:"kept"`
	}
	runJSON(t, k, rec, `import json, sys
print(json.dumps({"wave": "wave" in sys.modules, "kept": "ipykernel.kernelapp" in sys.modules and "json" in sys.modules}))`, &after)
	if after.Colorsys || !after.Kept {
		t.Errorf("after %%reset --aggressive: wave still imported %v, the start's modules kept %v", after.Colorsys, after.Kept)
	}
}

// fdInfo is one descriptor of a kernel process, as it reports it.
type fdInfo struct {
	FD   int    `json:"fd"`
	Link string `json:"link"`
	Mode int    `json:"mode"` // O_ACCMODE bits
}

// TestForkedKernelDescriptors checks a forked kernel holds no descriptor
// but its own: /dev/null on 0, its output pipe (which ipykernel moves off 1
// and 2 to capture them), the pipes ipykernel makes for that, its sockets,
// and the eventfd and epoll descriptors of zmq and asyncio. None may be
// shared with the template process.
func TestForkedKernelDescriptors(t *testing.T) {
	ts := sharedTemplates(t)
	k, rec := startForkedKernel(t, ts)
	var got struct {
		FDs      []fdInfo `json:"fds"`
		PipePort int      `json:"pipe_port"`
	}
	runJSON(t, k, rec, `import fcntl, json, os
fds = []
for fd in sorted(os.listdir('/proc/self/fd'), key=int):
    try:
        fds.append({"fd": int(fd), "link": os.readlink('/proc/self/fd/' + fd),
                    "mode": fcntl.fcntl(int(fd), fcntl.F_GETFL) & os.O_ACCMODE})
    except OSError:
        pass  # the listing's own descriptor
print(json.dumps({"fds": fds, "pipe_port": get_ipython().kernel.iopub_thread._pipe_port}))`, &got)

	outInode := pipeInode(t, k.outPipe)
	unix := unixSockets(t)
	tcp := tcpSockets(t)
	templateLinks := map[string]bool{}
	for _, s := range ts.Stats() {
		for _, l := range fdLinks(s.PID) {
			templateLinks[l] = true
		}
	}
	pipeEnds := map[string][]int{} // pipe link -> access modes seen
	for _, f := range got.FDs {
		if strings.HasPrefix(f.Link, "pipe:") {
			pipeEnds[f.Link] = append(pipeEnds[f.Link], f.Mode)
		}
	}
	socketRE := regexp.MustCompile(`^socket:\[(\d+)\]$`)
	var bad []string
	for _, f := range got.FDs {
		why := ""
		switch m := socketRE.FindStringSubmatch(f.Link); {
		case templateLinks[f.Link] && strings.Contains(f.Link, "["):
			why = "shared with the template"
		case f.FD == 0:
			if f.Link != "/dev/null" {
				why = "stdin is not /dev/null"
			}
		case f.Link == fmt.Sprintf("pipe:[%d]", outInode):
			// the kernel's own stdout and stderr, made by aiod for it
		case strings.HasPrefix(f.Link, "pipe:"):
			ends := pipeEnds[f.Link]
			if !slices.Contains(ends, os.O_RDONLY) || !slices.Contains(ends, os.O_WRONLY) {
				why = "a pipe whose other end is elsewhere"
			}
		case f.Link == "anon_inode:[eventfd]", f.Link == "anon_inode:[eventpoll]":
		case m != nil:
			if u, ok := unix[m[1]]; ok {
				if u.path != "" && !strings.HasPrefix(u.path, k.connDir+"/") {
					why = "a Unix socket outside the kernel's folder: " + u.path
				} else if u.typ != "0001" {
					why = "a Unix socket that is not SOCK_STREAM (the template's is SOCK_SEQPACKET)"
				}
			} else if port, ok := tcp[m[1]]; !ok || port != got.PipePort {
				// ipykernel 6.17's IOPub pipe (for output of forked
				// subprocesses) always listens on a loopback TCP port.
				why = fmt.Sprintf("a socket that is neither Unix nor ipykernel's IOPub pipe (tcp port %d, pipe port %d)", port, got.PipePort)
			}
		default:
			why = "not a descriptor of a kernel"
		}
		if why != "" {
			bad = append(bad, fmt.Sprintf("fd %d -> %s: %s", f.FD, f.Link, why))
		}
	}
	if len(bad) > 0 {
		t.Errorf("forked kernel holds descriptors that are not its own:\n%s", strings.Join(bad, "\n"))
	}
	if len(got.FDs) < 10 {
		t.Errorf("only %d descriptors listed: %+v", len(got.FDs), got.FDs)
	}
}

// pipeInode returns the inode of a pipe end.
func pipeInode(t testing.TB, f *os.File) uint64 {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return st.Ino
}

type unixSocket struct{ typ, path string }

// unixSockets reads /proc/net/unix: inode -> type and bound path.
func unixSockets(t testing.TB) map[string]unixSocket {
	t.Helper()
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]unixSocket{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		u := unixSocket{typ: f[4]}
		if len(f) > 7 {
			u.path = f[7]
		}
		out[f[6]] = u
	}
	return out
}

// tcpSockets reads /proc/net/tcp and tcp6: inode -> local port.
func tcpSockets(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			port, _ := strconv.ParseInt(hexPort, 16, 32)
			out[f[9]] = int(port)
		}
	}
	return out
}

// fdLinks lists where a process's descriptors point.
func fdLinks(pid int) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil {
			out = append(out, l)
		}
	}
	return out
}

func TestForkInterruptSignal(t *testing.T) {
	t.Parallel()
	k, rec := startForkedKernel(t, sharedTemplates(t))
	testInterrupt(t, k, rec)
}

func TestForkInterruptMessage(t *testing.T) {
	t.Parallel()
	k, rec := startForkedKernel(t, sharedTemplates(t), func(o *Options) {
		s := *o.Spec
		s.InterruptMode = InterruptMessage
		o.Spec = &s
	})
	testInterrupt(t, k, rec)
}

// TestForkedKernelKilledIsDetected kills a forked kernel with SIGKILL: aiod
// is told by its template, with the signal, as for a spawned kernel.
func TestForkedKernelKilledIsDetected(t *testing.T) {
	t.Parallel()
	k, _ := startForkedKernel(t, sharedTemplates(t))
	if err := syscall.Kill(k.Info().PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after SIGKILL")
	}
	var dead *jupyter.DeadError
	if err := k.Err(); !errors.As(err, &dead) || dead.Signal != "SIGKILL" ||
		err.Error() != "kernel died: killed by signal SIGKILL" {
		t.Fatalf("Err = %v (%#v)", err, err)
	}
	if err := k.Execute(context.Background(), jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: "1"}); !errors.As(err, &dead) {
		t.Errorf("Execute after death: %v", err)
	}
	assertGone(t, k)
	assertReaped(t, k.Info().PID)
}

// lastWords starts a child that holds the kernel's output pipe (as a
// kernel's subprocesses often do), writes to the pipe and exits with 7.
// The pipe is sys.stderr.fileno(): ipykernel puts fd 2 on a pipe of its
// own, whose thread passes writes on, too late for os._exit.
const lastWords = "import os, sys, subprocess\n" +
	"subprocess.Popen(['sleep', '600'], stderr=sys.stderr.fileno())\n" +
	"os.write(sys.stderr.fileno(), b'last words\\n')\n" +
	"os._exit(7)"

// TestForkedKernelExitCode checks an exit status travels from the
// template, and the kernel's last words with it.
func TestForkedKernelExitCode(t *testing.T) {
	t.Parallel()
	k, rec := startForkedKernel(t, sharedTemplates(t))
	// The kernel may die before Execute has returned: its death is the
	// answer either way.
	if err := k.Execute(context.Background(), jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: lastWords}); err != nil {
		var dead *jupyter.DeadError
		if !errors.As(err, &dead) {
			t.Fatal(err)
		}
	}
	select {
	case <-k.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after os._exit")
	}
	_ = rec
	var dead *jupyter.DeadError
	if err := k.Err(); !errors.As(err, &dead) || dead.ExitCode != 7 {
		t.Fatalf("Err = %v (%#v)", err, err)
	}
	// What it wrote to its stderr last explains it, though a child of it
	// still holds the pipe.
	if !strings.HasSuffix(dead.Output, "last words") {
		t.Errorf("the death's output %q lacks what the kernel wrote to fd 2", dead.Output)
	}
	assertReaped(t, k.Info().PID)
}

// TestForkRestart replaces a forked kernel by another, as a session restart
// does: the new one is a new process with none of the old state.
func TestForkRestart(t *testing.T) {
	t.Parallel()
	ts := sharedTemplates(t)
	a, recA := startForkedKernel(t, ts)
	run(t, a, recA, "x = 1")
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, recB := startForkedKernel(t, ts)
	if b.Info().PID == a.Info().PID {
		t.Fatal("restart kept the pid")
	}
	ms := run(t, b, recB, "x")
	if e := kerneltest.Find(ms, "iopub", "error"); e == nil || kerneltest.Field(e, "ename") != "NameError" {
		t.Errorf("x after restart: %s", kerneltest.Summary(ms))
	}
	assertGone(t, a)
}

// TestForkCloseLeavesNothing closes a forked kernel that started a
// subprocess: the process group is gone, nothing is left a zombie, and the
// template lists no child.
func TestForkCloseLeavesNothing(t *testing.T) {
	ts := sharedTemplates(t)
	k, rec := startForkedKernel(t, ts)
	run(t, k, rec, "import subprocess; p = subprocess.Popen(['sleep', '600'])")
	pid := k.Info().PID
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertGone(t, k)
	assertReaped(t, pid)
	for _, s := range ts.Stats() {
		for _, c := range kerneltest.Descendants(s.PID) {
			if c == pid {
				t.Errorf("template %d still has kernel %d below it", s.PID, pid)
			}
		}
	}
}

// assertReaped checks pid is not even a zombie any more.
func assertReaped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		if os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Errorf("process %d still exists 30s after it ended: %s", pid, b)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestForkEnvAndCwd forks two kernels with different cwd and env at once
// from one template; each sees its own, and the spec's env.
func TestForkEnvAndCwd(t *testing.T) {
	t.Parallel()
	ts := sharedTemplates(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	ks := make([]*Kernel, 2)
	recs := make([]*recorder, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			var err error
			ks[i], recs[i], err = tryStartKernel(t, forked(ts, func(o *Options) {
				o.Env = []string{fmt.Sprintf("AIOD_OPT_VAR=kernel %d", i), "AIOD_BOTH=options"}
				o.Cwd = dirs[i]
			}))
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, k := range ks {
		if k.StartMode() != StartFork {
			t.Fatalf("kernel %d was %s", i, k.StartMode())
		}
		// No JPY_PARENT_PID: a forked kernel dies with its template, and
		// is not told aiod's pid.
		got := stdout(run(t, k, recs[i], "import os, sys\n"+
			"print(os.environ['AIOD_OPT_VAR'], os.environ['AIOD_BOTH'], os.environ.get('JPY_PARENT_PID'), sep='|')\n"+
			"print(os.getcwd(), sys.path[0], sep='|')"))
		want := fmt.Sprintf("kernel %d|options|None\n%s|%s\n", i, dirs[i], dirs[i])
		if got != want {
			t.Errorf("kernel %d printed %q, want %q", i, got, want)
		}
	}

	// A spec's own env reaches its kernels through its own template.
	k, rec := startForkedKernel(t, ts, func(o *Options) {
		s := *o.Spec
		s.Env = map[string]string{"AIOD_SPEC_VAR": "from spec"}
		o.Spec = &s
	})
	if got := stdout(run(t, k, rec, "import os; print(os.environ['AIOD_SPEC_VAR'])")); got != "from spec\n" {
		t.Errorf("spec env: %q", got)
	}

	// A session whose env changes where IPython reads its configuration
	// gets a kernel app configured in the child, from that env.
	ipdir := t.TempDir()
	k, rec = startForkedKernel(t, ts, func(o *Options) { o.Env = []string{"IPYTHONDIR=" + ipdir} })
	if got := stdout(run(t, k, rec, "print(get_ipython().profile_dir.location)")); got != ipdir+"/profile_default\n" {
		t.Errorf("profile dir with IPYTHONDIR=%s: %q", ipdir, got)
	}

	// A folder that is not there fails as a spawn would, without falling back.
	_, _, err := tryStartKernel(t, forked(ts, func(o *Options) { o.Cwd = "/nonexistent/aiod" }))
	if err == nil || !strings.Contains(err.Error(), "chdir /nonexistent/aiod: no such file or directory") {
		t.Errorf("start in a missing folder: %v", err)
	}
}

// templateBack waits until a template process other than pid serves ts's
// template and returns its stats.
func templateBack(t *testing.T, ts *Templates, pid int) TemplateStats {
	t.Helper()
	ts.mu.Lock()
	tpl := ts.order[0]
	ts.mu.Unlock()
	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	for {
		tpl.mu.Lock()
		p, served := tpl.cur, tpl.served
		tpl.mu.Unlock()
		if p != nil && p.pid != pid {
			return tpl.Stats()
		}
		select {
		case <-served:
		case <-deadline.C:
			t.Fatalf("template not back within 90s: %+v", tpl.Stats())
		}
	}
}

// TestStoppedTemplateIsReplaced stops a template (SIGSTOP): a start waits
// for it only as long as it stays silent, is spawned instead, and the
// wedged template is replaced.
func TestStoppedTemplateIsReplaced(t *testing.T) {
	t.Parallel()
	var logs kerneltest.SyncBuffer
	ts, err := NewTemplates(TemplateConfig{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})), replyTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close(context.Background()) })
	a, _ := startForkedKernel(t, ts)
	before := ts.Stats()[0]
	if err := syscall.Kill(before.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	b, recB := startKernel(t, forked(ts))
	if b.StartMode() != StartSpawn {
		t.Errorf("start while the template is stopped: %s, want spawn", b.StartMode())
	}
	if got := stdout(run(t, b, recB, "print(6 * 7)")); got != "42\n" {
		t.Errorf("spawned fallback printed %q", got)
	}
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the wedged template's kernel still runs 30 s later: the template was not replaced")
	}
	templateBack(t, ts, before.PID)
	if kerneltest.Alive(before.PID) {
		t.Errorf("stopped template %d still alive", before.PID)
	}
	if !strings.Contains(logs.String(), "answered nothing for 1s") {
		t.Errorf("the log does not say why the template was replaced:\n%s", logs.String())
	}
}

// TestKilledTemplateIsReplaced kills a template: its kernel dies with it,
// the next start is spawned, and once the template is back starts fork
// again.
func TestKilledTemplateIsReplaced(t *testing.T) {
	var logs kerneltest.SyncBuffer
	ts, err := NewTemplates(TemplateConfig{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close(context.Background()) })
	a, _ := startForkedKernel(t, ts)
	before := ts.Stats()[0]
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// At once: the template is restarted no sooner than a second later.
	b, recB := startKernel(t, forked(ts))
	if b.StartMode() != StartSpawn {
		t.Errorf("start while the template is down: %s, want spawn", b.StartMode())
	}
	select {
	case <-a.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the kernel outlived its template by 15s")
	}
	var dead *jupyter.DeadError
	if err := a.Err(); !errors.As(err, &dead) || !strings.Contains(err.Error(), "template") {
		t.Errorf("kernel of a killed template: Err = %v", err)
	}
	assertGone(t, a)
	if got := stdout(run(t, b, recB, "print(6 * 7)")); got != "42\n" {
		t.Errorf("spawned fallback printed %q", got)
	}

	after := templateBack(t, ts, before.PID)
	if after.Restarts != 1 || after.Fallbacks < 1 || !strings.Contains(after.LastError, "SIGKILL") {
		t.Errorf("stats after the restart: %+v", after)
	}
	c, recC := startForkedKernel(t, ts)
	if got := stdout(run(t, c, recC, "print(6 * 7)")); got != "42\n" {
		t.Errorf("kernel of the new template printed %q", got)
	}
	if kerneltest.Alive(before.PID) {
		t.Errorf("killed template %d still alive", before.PID)
	}
	// Starts spawned while it was down are not logged each; the failure is.
	_, recD := startKernel(t, forked(ts))
	_ = recD
	if n := strings.Count(logs.String(), "kernel template failed"); n != 1 || strings.Contains(logs.String(), "could not start a kernel") {
		t.Errorf("the failure was logged %d times, want once:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "kernel template ready"); n != 2 {
		t.Errorf("%d ready lines, want 2:\n%s", n, logs.String())
	}
}

// TestUnforkableSpecIsSpawned: a kernelspec whose argv is not the standard
// launcher is spawned, templates or not; so is every spec in spawn mode.
func TestUnforkableSpecIsSpawned(t *testing.T) {
	k, rec := startKernel(t, forked(sharedTemplates(t), func(o *Options) {
		s := *o.Spec
		s.Argv = append([]string{s.Argv[0], "-X", "utf8"}, s.Argv[1:]...)
		o.Spec = &s
		if Forkable(&s) == nil {
			t.Errorf("argv %q counted forkable", s.Argv)
		}
	}))
	if k.StartMode() != StartSpawn {
		t.Errorf("unforkable spec started by %s", k.StartMode())
	}
	run(t, k, rec, "pass")

	spawnOnly, err := NewTemplates(TemplateConfig{Mode: StartSpawn})
	if err != nil {
		t.Fatal(err)
	}
	k, rec = startKernel(t, forked(spawnOnly))
	if k.StartMode() != StartSpawn || len(spawnOnly.Stats()) != 0 {
		t.Errorf("spawn mode started by %s, templates %+v", k.StartMode(), spawnOnly.Stats())
	}
	run(t, k, rec, "pass")
	if _, err := NewTemplates(TemplateConfig{Mode: "clone"}); err == nil || err.Error() != `kernel start mode "clone": want fork or spawn` {
		t.Errorf("bad mode: %v", err)
	}
}

// TestForkOverTCP keeps the tcp transport when asked.
func TestForkOverTCP(t *testing.T) {
	t.Parallel()
	k, rec := startForkedKernel(t, sharedTemplates(t), func(o *Options) { o.Transport = TransportTCP })
	if k.conn.Transport != TransportTCP || k.conn.ShellPort < 1024 {
		t.Errorf("connection %+v", k.conn)
	}
	run(t, k, rec, "pass")
}

// TestKernelsDieWithTheirParent runs a helper process that forks a kernel
// and then is killed with SIGKILL: the template and the kernel must go too.
func TestKernelsDieWithTheirParent(t *testing.T) {
	if os.Getenv("AIOD_FORK_HELPER") == "1" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestForkHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "AIOD_FORK_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait() //nolint:errcheck // killed below
	var template, kernel int
	var probeDir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "PIDS %d %d %s", &template, &kernel, &probeDir); err == nil {
			break
		}
	}
	if template == 0 || kernel == 0 {
		cmd.Process.Kill()
		t.Fatalf("helper printed no pids (%v)", sc.Err())
	}
	if !kerneltest.Alive(template) || !kerneltest.Alive(kernel) {
		t.Fatal("template or kernel not alive before the kill")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for kerneltest.Alive(template) || kerneltest.Alive(kernel) {
		if time.Now().After(deadline) {
			syscall.Kill(-kernel, syscall.SIGKILL)
			syscall.Kill(-template, syscall.SIGKILL)
			t.Fatalf("10s after their parent died: template alive %v, kernel alive %v",
				kerneltest.Alive(template), kerneltest.Alive(kernel))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The parent died while the template's probe was likely still running
	// (it starts once the template is ready): the template removed its
	// folder before it exited.
	if _, err := os.Stat(probeDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the template's probe folder %s is still there after the template died (%v)", probeDir, err)
	}
}

// TestForkHelperProcess is the helper of TestKernelsDieWithTheirParent.
func TestForkHelperProcess(t *testing.T) {
	if os.Getenv("AIOD_FORK_HELPER") != "1" {
		return
	}
	ts, err := NewTemplates(TemplateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := startForkedKernel(t, ts)
	ts.mu.Lock()
	tpl := ts.order[0]
	ts.mu.Unlock()
	tpl.mu.Lock()
	p := tpl.cur
	tpl.mu.Unlock()
	fmt.Printf("PIDS %d %d %s\n", p.pid, k.Info().PID, p.info.ProbeDir)
	time.Sleep(time.Minute) // killed by the test
}

// TestForkCancelledAtOnceEnds cancels a forked kernel's start as soon as
// the template has reported the fork: the kill that follows may come
// before the child has made its own session (setsid), so it must reach
// the child itself, else the child lives on and Start waits for its end
// for ever. Each start must end, in an error, with the child reaped.
func TestForkCancelledAtOnceEnds(t *testing.T) {
	ts := sharedTemplates(t)
	spec, err := DefaultPythonSpec()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testHookForked = func() {} })
	for i := range 12 {
		ctx, cancel := context.WithCancel(context.Background())
		testHookForked = cancel
		done := make(chan error, 1)
		go func() {
			k, err := Start(ctx, Options{Spec: spec, Handler: func(*jupyter.Message) {}, Logger: testLogger(),
				StartTimeout: startTimeout, Templates: ts})
			if err == nil {
				k.Close(context.Background()) //nolint:errcheck // the check below fails the test
				err = errors.New("started although its context was cancelled")
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("start %d: %v, want context.Canceled", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("start %d cancelled right after its fork has not ended in 30 s (templates: %+v)", i, ts.Stats())
		}
		cancel()
	}
	for _, s := range ts.Stats() {
		if c := kerneltest.Descendants(s.PID); len(c) > 0 {
			t.Errorf("template %d still has processes below it: %v", s.PID, c)
		}
	}
}

// TestFloodComesInBoundedMessages prints 24 MiB at full speed in a forked
// and in a spawned kernel: every byte arrives, in stream messages of about
// 1 MiB (aiod's patches make a write that leaves more buffered send it),
// not in the tens of MB ipykernel buffers between its flushes, ten of
// which aiod's socket reads ahead.
func TestFloodComesInBoundedMessages(t *testing.T) {
	for _, mode := range []string{StartFork, StartSpawn} {
		t.Run(mode, func(t *testing.T) {
			var k *Kernel
			var rec *recorder
			if mode == StartFork {
				k, rec = startForkedKernel(t, sharedTemplates(t))
			} else {
				k, rec = startKernel(t, nil)
			}
			if k.StartMode() != mode {
				t.Fatalf("started by %s, want %s", k.StartMode(), mode)
			}
			ms := run(t, k, rec, "import sys\nline = 'z' * 1023 + '\\n'\nfor i in range(24 * 1024):\n    sys.stdout.write(line)")
			var total, biggest, n int
			for _, m := range ms {
				if m.Header.MsgType != jupyter.MsgStream {
					continue
				}
				var c jupyter.StreamContent
				if err := json.Unmarshal(m.Content, &c); err != nil {
					t.Fatal(err)
				}
				total += len(c.Text)
				biggest = max(biggest, len(c.Text))
				n++
			}
			if total != 24<<20 {
				t.Fatalf("%d bytes in %d stream messages, want %d", total, n, 24<<20)
			}
			if biggest > 1<<20+1024 {
				t.Errorf("the biggest stream message holds %d bytes (of %d in %d messages), want at most 1 MiB and a line", biggest, total, n)
			}
		})
	}
}

// TestSpawnedKernelHasThePatches: a spawned ipykernel runs aiod's patches
// before its app, as a forked one has them: a failing shell escape fails
// the cell, and neither the patches' names nor their environment variable
// reach the user.
func TestSpawnedKernelHasThePatches(t *testing.T) {
	k, rec := startKernel(t, nil)
	ms := run(t, k, rec, "!exit 3")
	if e := kerneltest.Find(ms, "iopub", "error"); e == nil || !strings.Contains(string(e.Content), "CalledProcessError") {
		t.Errorf("a failing shell escape in a spawned kernel: %s", kerneltest.Summary(ms))
	}
	ms = run(t, k, rec, "import os, sys\nprint(sorted(n for n in ('apply', 'bound_stream_messages', 'STREAM_CHUNK') if n in globals()), 'AIOD_KERNEL_PATCHES' in os.environ, sys.path[0] == os.getcwd())")
	if out := stdout(ms); out != "[] False True\n" {
		t.Errorf("what the patches left to the user: %q", out)
	}
}

// TestTemplateCommandLineIsShort: the template's program and configuration
// (with the sandbox applier and plan under isolation) come on a pipe, so
// neither the template's command line nor a forked kernel's (which keeps
// the template's) shows them to ps (issue 40: the whole Python source was
// there).
func TestTemplateCommandLineIsShort(t *testing.T) {
	ts, err := NewTemplates(TemplateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close(context.Background()) })
	k, rec := startForkedKernel(t, ts)
	if got := stdout(run(t, k, rec, "print(6 * 7)")); got != "42\n" {
		t.Fatalf("forked kernel printed %q", got)
	}
	for name, pid := range map[string]int{"template": ts.Stats()[0].PID, "forked kernel": k.Info().PID} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			t.Fatal(err)
		}
		if cmdline := string(b); len(cmdline) > 512 || strings.Contains(cmdline, "def main") || strings.Contains(cmdline, `"parent"`) {
			t.Errorf("%s's command line (%d bytes): %.300q", name, len(cmdline), cmdline)
		}
	}
}

// TestHungTemplateIsGivenUp: a template whose imports hang, on a machine
// with CPU to spare, is given up at its ReadyTimeout and stopped, and its
// stats say why (the wait stretches only while the template is starved).
// TestTemplateStepsAllWork checks that every step the template takes
// before it forks worked with this machine's Python, ipykernel and C
// library: the preloads, the kernel app's configuration, the shell, the
// note of the modules, and the fills of the free blocks and chunks. Each
// step that fails is skipped in silence but for this report, and only the
// children's start-up would show it.
func TestTemplateStepsAllWork(t *testing.T) {
	ts := sharedTemplates(t)
	templateUp(t, ts)
	for _, st := range ts.Stats() {
		if st.State == "ready" && len(st.PreloadFailed) > 0 {
			t.Errorf("template %d (%s): steps that failed: %v", st.PID, st.Kernelspec, st.PreloadFailed)
		}
	}
}

func TestHungTemplateIsGivenUp(t *testing.T) {
	kerneltest.SkipShort(t, "a kernel template")
	spec, err := DefaultPythonSpec()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "aiod_hang.py"), []byte("import time\ntime.sleep(600)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts, err := NewTemplates(TemplateConfig{Preload: []string{"aiod_hang"}, ReadyTimeout: time.Second,
		Environ: append(os.Environ(), "PYTHONPATH="+dir), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close(context.Background()) })
	ts.Prepare(spec)
	ts.mu.Lock()
	tpl := ts.order[0]
	ts.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// The first start waits until the template is ready or has failed.
	if err := ts.AwaitFirst(ctx, spec); err != nil {
		t.Fatalf("AwaitFirst: %v", err)
	}
	if st := tpl.Stats(); !strings.Contains(st.LastError, "not ready within 1s") || st.State != "restarting" || st.PID != 0 {
		t.Errorf("stats of a hung template: %+v", st)
	}
}

// TestForkedKernelPinnedThroughStartup: every thread of a forked kernel
// runs on one CPU through its start-up (its IPython startup file, run
// after its zmq threads were made, finds them so), and all of them get
// every CPU back once the kernel has gone idle. On a machine of one CPU
// there is nothing to pin: they all run on it from the start.
func TestForkedKernelPinnedThroughStartup(t *testing.T) {
	ts := sharedTemplates(t)
	pinning := ts.pins != nil
	dir := t.TempDir()
	startup := filepath.Join(dir, "ipython", "profile_default", "startup")
	if err := os.MkdirAll(startup, 0o755); err != nil {
		t.Fatal(err)
	}
	seen := filepath.Join(dir, "seen")
	code := fmt.Sprintf("import os\nopen(%q, 'w').write(' '.join(str(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir('/proc/self/task')))\n", seen)
	if err := os.WriteFile(filepath.Join(startup, "00-cpus.py"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(o *Options) { o.Env = append(o.Env, "IPYTHONDIR="+filepath.Join(dir, "ipython")) }
	k, rec := startForkedKernel(t, ts, env)
	defer k.Close(context.Background())
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	sets := strings.Fields(string(b))
	if len(sets) < 3 {
		t.Fatalf("the startup file saw %d threads (%q), want the main one and zmq's", len(sets), b)
	}
	for _, s := range sets {
		if s != sets[0] || (pinning && strings.Contains(s, ",")) {
			t.Fatalf("threads' CPUs during the start-up: %q, want one and the same CPU each", b)
		}
	}
	if pinning { // the template left that CPU to the child once it had forked
		cpu, err := strconv.Atoi(strings.Trim(sets[0], "[]"))
		if err != nil {
			t.Fatalf("startup file: %q", b)
		}
		for _, st := range ts.Stats() {
			var set unix.CPUSet
			if st.LiveKernels == 0 || unix.SchedGetaffinity(st.PID, &set) != nil {
				continue
			}
			if set.IsSet(cpu) || set.Count() == 0 {
				t.Errorf("template %d runs on %d CPUs, CPU %d among them, while its child starts there", st.PID, set.Count(), cpu)
			}
		}
	}
	// Once idle (its first execution done), every thread has all CPUs.
	if got := stdout(run(t, k, rec, "print('ok')")); got != "ok\n" {
		t.Fatalf("printed %q", got)
	}
	var mine unix.CPUSet // what the kernels get back: this process's CPUs
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		n, all := 0, true
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", k.pid))
		for _, task := range tasks {
			tid, _ := strconv.Atoi(filepath.Base(task))
			var got unix.CPUSet
			if unix.SchedGetaffinity(tid, &got) == nil {
				n++
				all = all && got == mine
			}
		}
		if n > 0 && all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads of the idle kernel still pinned after a minute (%d threads read)", n)
		}
		select {
		case <-k.Done():
			t.Fatal("the kernel ended")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if got := stdout(run(t, k, rec, "print(len(__import__('os').sched_getaffinity(0)))")); got != strconv.Itoa(mine.Count())+"\n" {
		t.Errorf("the unpinned kernel runs on %q CPUs, want %d", got, mine.Count())
	}
}

// TestForkCopiesHotPagesAtOnce: once ready, a template learns from its
// probe which of its pages a kernel's start and first execution copy, and
// pins them, so that fork() copies them at once. A kernel forked after that
// takes fewer page faults through its start and first execution than half
// the pages pinned (without them it takes more than all of them: about
// 3,300 against 2,800 pinned on the machine of bench/README.md). It holds
// no descriptor of the pins. The probe's folder is gone with the template.
func TestForkCopiesHotPagesAtOnce(t *testing.T) {
	kerneltest.SkipShort(t, "a kernel template")
	t.Parallel()
	ts, err := NewTemplates(TemplateConfig{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close(context.Background()) })
	templateUp(t, ts)
	spec, err := DefaultPythonSpec()
	if err != nil {
		t.Fatal(err)
	}
	tpl := ts.template(spec)
	tpl.mu.Lock()
	p := tpl.cur
	tpl.mu.Unlock()
	select {
	case <-p.hotSet:
	case <-time.After(3 * time.Minute):
		t.Fatal("the template did not report its hot pages within 3 minutes of being ready")
	}
	p.mu.Lock()
	hot := p.hot
	p.mu.Unlock()
	if hot.Error != "" || hot.Pages < 500 {
		t.Fatalf("hot pages: %d, error %q; want 500 or more", hot.Pages, hot.Error)
	}
	if st := tpl.Stats(); st.HotPages != hot.Pages || st.HotError != "" {
		t.Errorf("stats say %d hot pages (error %q), the template %d", st.HotPages, st.HotError, hot.Pages)
	}
	k, rec := startKernel(t, forked(ts))
	if k.StartMode() != StartFork {
		t.Fatalf("kernel started by %s, want fork", k.StartMode())
	}
	var got struct {
		Faults int      `json:"faults"`
		Links  []string `json:"links"`
	}
	runJSON(t, k, rec, `import json, os, resource
def link(fd):  # '' for the listing's own descriptor, gone by now
    try: return os.readlink('/proc/self/fd/' + fd)
    except OSError: return ''
print(json.dumps({"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
                  "links": [link(fd) for fd in os.listdir('/proc/self/fd')]}))`, &got)
	t.Logf("hot pages %d (learned in %.3f s); the kernel's page faults %d", hot.Pages, hot.Seconds, got.Faults)
	if got.Faults >= hot.Pages/2 {
		t.Errorf("the kernel took %d page faults through its start and first execution, want fewer than half the %d hot pages", got.Faults, hot.Pages)
	}
	for _, l := range got.Links {
		if strings.Contains(l, "io_uring") {
			t.Errorf("the kernel holds %s: a descriptor of the template's pinned pages", l)
		}
	}
	if p.info.ProbeDir == "" {
		t.Fatal("the template named no probe folder")
	}
	k.Close(context.Background())
	ts.Close(context.Background())
	if _, err := os.Stat(p.info.ProbeDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the probe's folder %s is still there after Close (%v)", p.info.ProbeDir, err)
	}
}
