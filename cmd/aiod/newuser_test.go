package main

// What a new user tripped on (issue 13) that only the real binary shows:
// start-up checks, --help, the access log and the logs of lost state.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// runBinary runs aiod to its exit (bounded) and returns its exit code and
// everything it printed.
func runBinary(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, daemonBin, args...)
	cmd.Env = append(cleanEnv(), env...)
	if !hasStateDir(args, env) {
		cmd.Env = append(cmd.Env, "AIO_STATE_DIR="+t.TempDir())
	}
	if !hasSetting(args, env, "--tenant-uids", "AIO_TENANT_UIDS=") {
		cmd.Env = append(cmd.Env, "AIO_TENANT_UIDS="+kerneltest.UIDRangeFlag(t))
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("aiod %v: %v\n%s", args, err, out)
	return -1, ""
}

// Item 3: settings that cannot work stop the daemon at once, with exit
// code 2 and one line that names the setting, its value and the fix.
func TestStartupRefusesSettingsThatCannotWork(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "plain-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// An address in use, and a state directory another process holds
	// (aiod's lock: the lock file's flock).
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	busy := held.Addr().String()
	state := t.TempDir()
	lock, err := os.OpenFile(filepath.Join(state, "aiod.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"missing workdir", nil, []string{"--workdir", "/nonexistent"},
			[]string{`--workdir "/nonexistent"`, "no such folder", "create it"}},
		{"workdir from the variable is a file", []string{"AIO_WORKDIR=" + file}, nil,
			[]string{`AIO_WORKDIR "` + file + `"`, "not a folder"}},
		{"default timeout over the max", nil, []string{"--max-timeout", "2", "--default-timeout", "30"},
			[]string{"--default-timeout 30", "--max-timeout 2", "lower --default-timeout or raise --max-timeout"}},
		{"default timeout over the max from the variable", []string{"AIO_MAX_TIMEOUT=2"}, nil,
			[]string{"--default-timeout 30", "AIO_MAX_TIMEOUT 2"}},
		{"bad backend", nil, []string{"--code-backend", "bogus"}, []string{`--code-backend "bogus"`, "want auto, native or kernel"}},
		{"unknown flag", nil, []string{"--no-such-flag"}, []string{"no-such-flag", "aiod --help"}},
		{"address in use", nil, []string{"--addr", busy}, []string{busy, "address already in use"}},
		{"profile address in use", nil, []string{"--pprof-addr", busy}, []string{"--pprof-addr " + busy, "address already in use"}},
		{"state directory held", nil, []string{"--state-dir", state}, []string{"--state-dir", state, "in use by another process"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if len(args) < 2 || args[0] != "--addr" {
				args = append([]string{"--addr", "127.0.0.1:0"}, args...)
			}
			code, out := runBinary(t, c.env, args...)
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if code != 2 || len(lines) != 1 {
				t.Fatalf("exit %d with %d lines, want 2 and one line:\n%s", code, len(lines), out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("the line does not say %q: %s", w, out)
				}
			}
		})
	}
}

// Item 10: --help shows what each flag holds (not "value") and names the
// variables read besides AIO_*.
func TestHelpShowsTypesAndPassthrough(t *testing.T) {
	t.Parallel()
	code, out := runBinary(t, nil, "--help")
	if code != 0 {
		t.Fatalf("--help exit %d:\n%s", code, out)
	}
	for _, want := range []string{"--default-timeout seconds", "--max-body bytes", "--kernel-prewarm auto|count",
		"--kernel-warmup true|false", "--addr host:port", "--workdir folder", "--log-level debug|info|warn|error",
		"--access-log true|false", "KERNEL_*", "JWT_PUBLIC_KEY"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?m)^\s+--\S+ value$`).MatchString(out) {
		t.Errorf("--help still shows a flag of type value:\n%s", out)
	}
}

// Item 10: one access line per request (method, route pattern, status,
// duration, bytes; never the body, the query or a credential), and the
// events that cost a session its state are logged at info with its id and
// the reason: a kernel death, a restart after a failed interrupt, an idle
// reclaim.
func TestAccessLogAndLossLogs(t *testing.T) {
	t.Parallel()
	const token = "acc3ss-t0ken"
	// Four kernels start one after another: on a loaded machine one can take
	// more than the default minute.
	d := startDaemonEnv(t, []string{"AIO_TOKEN=" + token}, "--code-backend", "kernel", "--kernel-idle", "4", "--kernel-start-timeout", "180")
	d.token = token
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	authed := func(method, path string, body any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, d.url+path, strings.NewReader(mustJSON(t, body)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	authed("POST", "/v2/code/execute", map[string]any{"language": "python", "session_id": "secret-session-id", "code": "print('BODY_MARKER')"})
	authed("DELETE", "/v2/code/sessions/secret-session-id?token="+token, nil)
	authed("GET", "/v2/nothing-here", nil)

	waitLog := func(re string) string {
		t.Helper()
		rx := regexp.MustCompile(re)
		for deadline := time.Now().Add(2 * time.Minute); ; {
			if m := rx.FindString(d.stderr.String()); m != "" {
				return m
			}
			if time.Now().After(deadline) {
				t.Fatalf("no log line matching %s; stderr:\n%s", re, d.stderr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitLog(`level=INFO msg=http method=POST route=/v2/code/execute status=200 ms=[0-9.]+ bytes=[1-9][0-9]*`)
	waitLog(`level=INFO msg=http method=DELETE route=/v2/code/sessions/\{id\} status=200 `)
	waitLog(`level=INFO msg=http method=GET route=- status=404 `)
	for _, l := range strings.Split(d.stderr.String(), "\n") {
		if strings.Contains(l, "msg=http") && (strings.Contains(l, token) || strings.Contains(l, "BODY_MARKER") || strings.Contains(l, "secret-session-id")) {
			t.Errorf("an access line holds a credential, a body or an id: %s", l)
		}
	}

	// A kernel death, logged when it happens.
	d.execute(ctx, "doomed", "x = 1", 60)
	pid := d.sessionPIDs(ctx)["doomed"]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitLog(`level=INFO msg="runtime died" session=doomed language=python backend=kernel reason="the kernel died while idle: kernel died: killed by signal SIGKILL"`)

	// A restart after an interrupt the code ignores.
	var env envelope[execData]
	d.do(ctx, "POST", "/v2/code/execute", map[string]any{"language": "python", "session_id": "stuck", "timeout": 2,
		"code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)"}, &env)
	if env.Data.Status != "timeout" || !strings.Contains(env.Message, "the interrupt failed") {
		t.Fatalf("the stuck call: %q %q", env.Data.Status, env.Message)
	}
	waitLog(`level=INFO msg="runtime restarted" session=stuck language=python backend=kernel reason="it was restarted after a timeout \(interrupt failed: `)

	// An idle reclaim, with how long it was idle and the limit.
	d.execute(ctx, "sleepy", "y = 1", 60)
	waitLog(`level=INFO msg="session closed" session=sleepy language=python why=idle reason="the session was reclaimed after being idle for [0-9]+ s \(limit 4 s\)"`)
}

// Item 10: --access-log=false turns the access log off.
func TestAccessLogOff(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--access-log=false", "--code-backend", "native")
	resp, err := d.client.Get(d.url + "/v2/code/info")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	d.stop()
	if strings.Contains(d.stderr.String(), "msg=http ") {
		t.Fatalf("access lines with --access-log=false:\n%s", d.stderr)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Issue 40, item 1: a second daemon on its own state directory, both with
// the default settings, isolates its tenants as the first does (it used
// to log that the first held the uids and run every tenant as root): each
// claims a block of uids of its own, recorded in its state directory and
// kept across a restart, and a tenant's `id -u` in either is in its
// daemon's block, never 0. The same uids given by hand to both, with
// --isolation tenant or auto, stop the second at start with exit code 2.
func TestTwoDefaultDaemonsBothIsolated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stateA := t.TempDir()
	a := startDaemon(t, "--tenant-uids", "auto", "--state-dir", stateA)
	b := startDaemon(t, "--tenant-uids", "auto")
	uids := map[string]string{}
	for name, d := range map[string]*daemon{"first": a, "second": b} {
		_, env := d.getJSON(ctx, "/v2/code/info")
		iso, _ := env["data"].(map[string]any)["isolation"].(map[string]any)
		if iso["mode"] != "tenant" {
			t.Fatalf("%s daemon: isolation %v, want tenant", name, iso)
		}
		r, _ := iso["uids"].(string)
		var first, last int
		if n, _ := fmt.Sscanf(r, "%d-%d", &first, &last); n != 2 || first < 2_000_000_000 || last-first != 999_999 {
			t.Fatalf("%s daemon's tenant uids %q, want a block of 1,000,000 from 2000000000 up", name, r)
		}
		for _, lang := range []string{"bash", "python"} {
			code := map[string]string{"bash": "id -u", "python": "import os; print(os.getuid())"}[lang]
			got := d.run(ctx, lang, "", code, 60)
			var uid int
			if _, err := fmt.Sscan(got.Data.Stdout, &uid); err != nil || uid < first || uid > last {
				t.Fatalf("%s daemon, %s: uid %q, want one of %s (%+v)", name, lang, got.Data.Stdout, r, got)
			}
		}
		uids[name] = r
	}
	if uids["first"] == uids["second"] {
		t.Fatalf("both daemons hand out %s", uids["first"])
	}
	rec, err := os.ReadFile(filepath.Join(stateA, "tenant-uids"))
	if err != nil || strings.TrimSpace(string(rec)) != uids["first"] {
		t.Fatalf("the first state directory records %q (%v), want %s", rec, err, uids["first"])
	}

	// The first restarts on its state directory: the same block.
	a.stop()
	a = startDaemon(t, "--tenant-uids", "auto", "--state-dir", stateA)
	_, env := a.getJSON(ctx, "/v2/code/info")
	if iso, _ := env["data"].(map[string]any)["isolation"].(map[string]any); iso["uids"] != uids["first"] {
		t.Fatalf("after a restart the first daemon hands out %v, want %s", iso["uids"], uids["first"])
	}

	// Given the second's uids by hand, a third daemon refuses at start,
	// whether tenant isolation is asked for or left to auto.
	for _, mode := range []string{"tenant", "auto"} {
		code, out := runBinary(t, nil, "--addr", "127.0.0.1:0", "--isolation", mode, "--tenant-uids", uids["second"])
		if code != 2 || !strings.Contains(out, "already hands out tenant uids "+uids["second"]) {
			t.Errorf("--isolation %s with the second daemon's uids: exit %d, want 2 naming them:\n%s", mode, code, out)
		}
	}
}

// Issue 40, item 2: --workdir naming a host folder with files, under
// tenant isolation, is said at start (the log and /v2/code/info's
// warnings), since each tenant sees a folder of its own there; the
// kernel's folder is indeed empty.
func TestWorkdirWithHostFilesIsWarned(t *testing.T) {
	t.Parallel()
	wd := t.TempDir()
	if err := os.WriteFile(filepath.Join(wd, "cities.csv"), []byte("name\nParis\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := startDaemon(t, "--workdir", wd)
	const want = " holds files on the host that runtimes do not see: under tenant isolation"
	if !d.logged("--workdir " + wd + want) {
		t.Fatalf("no start-up warning about %s:\n%s", wd, d.stderr)
	}
	_, env := d.getJSON(ctx, "/v2/code/info")
	warns := fmt.Sprint(env["data"].(map[string]any)["warnings"])
	if !strings.Contains(warns, want) {
		t.Fatalf("/v2/code/info warnings: %s", warns)
	}
	if got := d.run(ctx, "python", "", "import os; print(os.getcwd(), os.listdir('.'))", 60); strings.TrimSpace(got.Data.Stdout) != wd+" []" {
		t.Fatalf("the kernel's folder: %+v", got)
	}

	// Without files there, nothing is said.
	empty := startDaemon(t, "--workdir", t.TempDir())
	_, env = empty.getJSON(ctx, "/v2/code/info")
	if warns := fmt.Sprint(env["data"].(map[string]any)["warnings"]); strings.Contains(warns, want) {
		t.Fatalf("warned of an empty working folder: %s", warns)
	}
}

// Issue 40, item 2: --volume shows host folders in every tenant's view:
// one read-only at a new folder under /home, one read-write over an
// existing host folder (/mnt). Kernels, bash, Node and the file plane see
// them; writes to the read-only one are refused (EROFS, and a 4xx on the
// plane); what a kernel writes to the read-write one is on the host.
// --volume without tenant isolation, or at a path the view gives the
// tenant, stops aiod at start with exit code 2.
func TestVolumesInEveryTenantsView(t *testing.T) {
	t.Parallel()
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "cities.csv"), []byte("name\nParis\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for dir, mode := range map[string]os.FileMode{ro: 0o755, rw: 0o777} {
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := startDaemon(t, "--volume", ro+":/home/data", "--volume", rw+":/mnt:rw")

	py := d.run(ctx, "python", "v", `import os
print(open('/home/data/cities.csv').read().split()[1])
try:
    open('/home/data/new.txt', 'w')
except OSError as e:
    print(e.strerror)
open('/mnt/from-kernel.txt', 'w').write('kept')
print(os.getuid())`, 60)
	var uid int
	lines := strings.Fields(py.Data.Stdout)
	if !py.Success || len(lines) < 5 || lines[0] != "Paris" || strings.Join(lines[1:4], " ") != "Read-only file system" {
		t.Fatalf("python: %+v", py)
	}
	fmt.Sscan(lines[4], &uid)
	b, err := os.ReadFile(filepath.Join(rw, "from-kernel.txt"))
	st, _ := os.Stat(filepath.Join(rw, "from-kernel.txt"))
	if err != nil || string(b) != "kept" || st.Sys().(*syscall.Stat_t).Uid != uint32(uid) {
		t.Fatalf("the kernel's file on the host: %q %v (uid %d)", b, err, uid)
	}
	if _, err := os.Stat(filepath.Join(ro, "new.txt")); err == nil {
		t.Fatal("a file appeared in the read-only volume")
	}
	if sh := d.run(ctx, "bash", "", "cat /home/data/cities.csv; ls /mnt; touch /home/data/x 2>&1 || true", 60); !strings.Contains(sh.Data.Stdout, "Paris") ||
		!strings.Contains(sh.Data.Stdout, "from-kernel.txt") || !strings.Contains(sh.Data.Stdout, "Read-only file system") {
		t.Fatalf("bash: %+v", sh)
	}
	if js := d.run(ctx, "javascript", "", "console.log(require('fs').readFileSync('/home/data/cities.csv', 'utf8').split('\\n')[1])", 60); strings.TrimSpace(js.Data.Stdout) != "Paris" {
		t.Fatalf("node: %+v", js)
	}

	// The file plane: the same view.
	_, env := d.getJSON(ctx, "/v2/fs/list?path=/home/data")
	if !strings.Contains(fmt.Sprint(env["data"]), "cities.csv") {
		t.Fatalf("the plane's listing of /home/data: %v", env)
	}
	w := d.post(ctx, "/v2/fs/write", map[string]any{"path": "/home/data/plane.txt", "content": "x"})
	if w.status < 400 || w.status >= 500 || !strings.Contains(w.raw, "ead-only") {
		t.Fatalf("a write to the read-only volume through the plane: %d %s", w.status, w.raw)
	}
	if w := d.post(ctx, "/v2/fs/write", map[string]any{"path": "/mnt/plane.txt", "content": "y"}); w.status != 200 {
		t.Fatalf("a write to the read-write volume through the plane: %d %s", w.status, w.raw)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "plane.txt")); err != nil || string(b) != "y" {
		t.Fatalf("the plane's file on the host: %q %v", b, err)
	}
	_, env = d.getJSON(ctx, "/v2/code/info")
	if view := fmt.Sprint(env["data"].(map[string]any)["isolation"].(map[string]any)["view"]); !strings.Contains(view, "/home/data: the host's "+ro+" (--volume), read-only") {
		t.Fatalf("info's view: %s", view)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--isolation", "none", "--volume", ro}, "--volume needs tenant isolation"},
		{[]string{"--volume", ro + ":/tmp/data"}, "is inside /tmp"},
		{[]string{"--volume", ro + ":/srv/no-such-folder-for-aiod"}, "is not a folder of the host"},
		{[]string{"--volume", "/no/such/host/folder:/home/x"}, "no such file or directory"},
	} {
		code, out := runBinary(t, nil, append([]string{"--addr", "127.0.0.1:0"}, c.args...)...)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("aiod %v: exit %d, want 2 saying %q:\n%s", c.args, code, c.want, out)
		}
	}
}

// Issue 40, item 2: a tenant's own folder persists: what a kernel writes
// in its HOME is there after aiod restarts on the same state directory,
// for the kernel and the file plane, and on the host in
// STATE/tenants/NAME/home.
func TestTenantFolderKeptAcrossRestart(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	uids := kerneltest.UIDRangeFlag(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := startDaemon(t, "--state-dir", state, "--tenant-uids", uids)
	if w := d.run(ctx, "python", "", "import os; open(os.path.expanduser('~/keep.txt'), 'w').write('kept'); print(os.path.expanduser('~'))", 60); strings.TrimSpace(w.Data.Stdout) != "/home/user" {
		t.Fatalf("write: %+v", w)
	}
	// A module in the tenant's user site-packages, where `pip install
	// --user` puts one (docs/isolation.md): the next kernel imports it.
	if w := d.run(ctx, "python", "", userSiteModule, 60); w.Data.Status != "ok" {
		t.Fatalf("write a module in the user site: %+v", w)
	}
	if r := d.run(ctx, "python", "", "import tenantmod, site; print(tenantmod.WHERE, site.getusersitepackages())", 60); !strings.HasPrefix(strings.TrimSpace(r.Data.Stdout), "user site /home/user/.local/lib/python3") {
		t.Fatalf("import from the user site: %+v", r)
	}
	// The kernels' private folders are in the state directory, which the
	// next daemon empties (one killed without a stop leaves them), and a
	// stop leaves none.
	if conns, _ := filepath.Glob(filepath.Join(state, "kernels", "aiod-kernel-*", "kernel.json")); len(conns) == 0 {
		t.Fatalf("no kernel's connection folder in STATE/kernels")
	}
	d.stop()
	if _, err := os.Stat(filepath.Join(state, "kernels")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("STATE/kernels after a stop: %v, want it gone", err)
	}
	homes, _ := filepath.Glob(filepath.Join(state, "tenants", "default-*", "home", "keep.txt"))
	if len(homes) != 1 {
		t.Fatalf("on the host: %v, want STATE/tenants/default-…/home/keep.txt", homes)
	}
	d = startDaemon(t, "--state-dir", state, "--tenant-uids", uids)
	if r := d.run(ctx, "python", "", "import os, tenantmod; print(open(os.path.expanduser('~/keep.txt')).read(), tenantmod.WHERE)", 60); strings.TrimSpace(r.Data.Stdout) != "kept user site" {
		t.Fatalf("after the restart: %+v", r)
	}
	_, env := d.getJSON(ctx, "/v2/fs/list?path=/home/user")
	if !strings.Contains(fmt.Sprint(env["data"]), "keep.txt") {
		t.Fatalf("the plane after the restart: %v", env)
	}
}

// userSiteModule writes tenantmod.py into the user site-packages of the
// kernel's HOME, as `pip install --user` would.
const userSiteModule = "import os, sys\n" +
	"d = os.path.expanduser('~/.local/lib/python%d.%d/site-packages' % sys.version_info[:2])\n" +
	"os.makedirs(d, exist_ok=True)\n" +
	"open(os.path.join(d, 'tenantmod.py'), 'w').write(\"WHERE = 'user site'\\n\")"

// readmeBlock is the first ```sh block of the README after the heading.
func readmeBlock(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README has no %q", heading)
	}
	_, rest, _ = strings.Cut(rest, "```sh\n")
	block, _, _ := strings.Cut(rest, "```")
	return strings.Split(strings.TrimSpace(block), "\n")
}

// Issue 40, items 4 and 5: the README's "Several tenants" is followed to
// the letter. Its openssl lines make a key pair and a token that a daemon
// started with that key takes as the tenant alice; and its copy command
// hands the default tenant's HOME to the token tenant after credentials
// are turned on.
func TestReadmeSeveralTenants(t *testing.T) {
	t.Parallel()
	lines := readmeBlock(t, "## Several tenants")
	dir := t.TempDir()
	var script []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "aiod ") && !strings.HasPrefix(l, "curl ") {
			script = append(script, l)
		}
	}
	script = append(script, `printf %s "$TOKEN"`)
	cmd := exec.Command("bash", "-euc", strings.Join(script, "\n"))
	cmd.Dir = dir
	tok, err := cmd.Output()
	if err != nil || strings.Count(string(tok), ".") != 2 {
		t.Fatalf("the README's lines: %v, token %q", err, tok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := startDaemon(t, "--jwt-public-key-file", filepath.Join(dir, "jwt.pub"))
	alice := &caller{t: t, d: d, name: "alice", token: string(tok)}
	if st, env := alice.call(ctx, http.MethodGet, "/v2/code/info", nil); st != 200 || env["data"].(map[string]any)["isolation"].(map[string]any)["tenant"] != "jwt:alice" {
		t.Fatalf("the README's token: %d %v", st, env)
	}

	// Credentials turned on: the default tenant's HOME, copied as the
	// README says, is the token tenant's.
	state := t.TempDir()
	uids := kerneltest.UIDRangeFlag(t)
	open := startDaemon(t, "--state-dir", state, "--tenant-uids", uids)
	(&caller{t: t, d: open, name: "default"}).run(ctx, "python", "", "import os; os.makedirs(os.path.expanduser('~/analysis')); open(os.path.expanduser('~/analysis/result.txt'), 'w').write('42')")
	open.stop()
	withToken := startDaemonEnv(t, []string{"AIO_TOKEN=readme-token"}, "--state-dir", state, "--tenant-uids", uids)
	tokenCaller := &caller{t: t, d: withToken, name: "token", token: "readme-token"}
	if got := tokenCaller.run(ctx, "python", "", "import os; print(os.path.exists(os.path.expanduser('~/analysis')))"); strings.TrimSpace(got) != "False" {
		t.Fatalf("the token tenant sees the default tenant's folder before the copy: %q", got)
	}
	var copyCmd string
	for _, l := range strings.Split(string(mustRead(t, "../../README.md")), "\n") {
		if _, c, ok := strings.Cut(l, "`u=$(cat STATE/"); ok {
			copyCmd = "u=$(cat STATE/" + strings.TrimSuffix(c, "`")
		}
	}
	if copyCmd == "" {
		t.Fatal("the README has no copy command")
	}
	if out, err := exec.Command("bash", "-euc", strings.ReplaceAll(copyCmd, "STATE", state)).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", copyCmd, err, out)
	}
	if got := tokenCaller.run(ctx, "python", "", "import os; print(open(os.path.expanduser('~/analysis/result.txt')).read()); open(os.path.expanduser('~/analysis/more.txt'), 'w').write('x')"); strings.TrimSpace(got) != "42" {
		t.Fatalf("after the README's copy: %q", got)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
