package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// kernelPool is a caller's kernel pool as /v2/code/info reports it.
func (c *caller) kernelPool(ctx context.Context) (taken, misses float64) {
	c.t.Helper()
	st, env := c.call(ctx, http.MethodGet, "/v2/code/info", nil)
	data, _ := env["data"].(map[string]any)
	pools, _ := data["pools"].(map[string]any)
	k, _ := pools["kernel"].(map[string]any)
	if st != 200 || k == nil {
		c.t.Fatalf("%s: /v2/code/info: %d %v", c.name, st, env)
	}
	taken, _ = k["taken"].(float64)
	misses, _ = k["misses"].(float64)
	return taken, misses
}

// poolReady is /metrics' aiod_pool_ready{pool="kernel"}: the kernels ready
// in every tenant's pools and the spare's.
func (d *daemon) poolReady(ctx context.Context) int {
	d.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `aiod_pool_ready{pool="kernel"} `); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return -1
}

// waitPoolReady waits until n kernels are ready across the pools.
func (d *daemon) waitPoolReady(ctx context.Context, n int) {
	d.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for d.poolReady(ctx) != n {
		if time.Now().After(deadline) {
			d.t.Fatalf("%d kernels ready, want %d; log:\n%s", d.poolReady(ctx), n, d.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processStart is when pid started, in clock ticks since boot
// (/proc/PID/stat's starttime), and now in the same unit.
func processStart(t *testing.T, pid int) (start, now int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	start, _ = strconv.ParseInt(f[19], 10, 64) // field 22 of the line
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	secs, _ := strconv.ParseFloat(strings.Fields(string(up))[0], 64)
	return start, int64(secs * 100) // USER_HZ is 100 on Linux
}

// tenantFolders reads the state directory's tenant folders: each folder's
// uid, and the spare folders among them.
func tenantFolders(t *testing.T, state string) (uids map[string]string, spares []string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(state, "tenants"))
	if err != nil {
		t.Fatal(err)
	}
	uids = map[string]string{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".spare-") {
			spares = append(spares, e.Name())
		}
		b, _ := os.ReadFile(filepath.Join(state, "tenants", e.Name(), "uid"))
		uids[e.Name()] = strings.TrimSpace(string(b))
	}
	return uids, spares
}

// distinctUIDs fails when two folders hold one uid.
func distinctUIDs(t *testing.T, uids map[string]string) {
	t.Helper()
	seen := map[string]string{}
	for name, uid := range uids {
		if uid == "" {
			t.Errorf("folder %s has no uid", name)
		}
		if other, ok := seen[uid]; ok {
			t.Errorf("folders %s and %s share uid %s", name, other, uid)
		}
		seen[uid] = name
	}
}

// spareProbe prints what the kernel knows of itself: its pid, uid, HOME,
// account name, working folder, whether the tenant's plane file and
// alice's file are there, and whether anything it can read names a spare.
const spareProbe = `import os, pwd, socket
mounts = open("/proc/self/mountinfo").read()
env = "\n".join(k + "=" + v for k, v in os.environ.items())
print(os.getpid(), os.getuid(), os.environ["HOME"], os.path.expanduser("~"), pwd.getpwuid(os.getuid()).pw_name, os.getcwd(),
      open("/tmp/plane.txt").read() if os.path.exists("/tmp/plane.txt") else "-", os.path.exists("/tmp/alice.txt"),
      "spare" in mounts or "spare" in env or "spare" in socket.gethostname() or "spare" in open("/etc/passwd").read())`

// TestNewTenantsTakePooledKernels is issue 25 item 3's last point on the
// real binary: under tenant isolation a JWT subject aiod has never seen
// gets a kernel from a pool on its first session (the spare sandbox it
// adopts), running as its own uid in its own folders, behind an egress
// proxy that names it; the spare is replaced for the next new tenant;
// restarts leak neither spare folders nor uids.
func TestNewTenantsTakePooledKernels(t *testing.T) {
	t.Parallel()
	priv, pub := tenantKey(t)
	state := t.TempDir()
	env := []string{"AIO_JWT_PUBLIC_KEY=" + pub, "AIO_TENANT_UIDS=" + kerneltest.UIDRangeFlag(t)}
	args := []string{"--state-dir", state, "--code-backend", "kernel", "--kernel-prewarm", "1", "--runtime-network", "allow"}
	d := startDaemonEnv(t, env, args...)
	d.token = tenantJWT(t, priv, "metrics") // reading /metrics makes no sandbox
	first, last := tenantUIDRange(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	who := func(name string) *caller {
		return &caller{t: t, d: d, name: name, token: tenantJWT(t, priv, name)}
	}
	type probe struct {
		pid, uid                    int
		home, user, name, cwd, file string
		alices, spare               string
	}
	// firstSession runs the probe as c's first named session and checks
	// that its kernel came from the pool: the pool's taken counter, and a
	// process older than the request.
	firstSession := func(c *caller) probe {
		t.Helper()
		out := c.run(ctx, "python", "first", spareProbe)
		var p probe
		if _, err := fmt.Sscan(out, &p.pid, &p.uid, &p.home, &p.user, &p.name, &p.cwd, &p.file, &p.alices, &p.spare); err != nil {
			t.Fatalf("%s's probe %q: %v", c.name, out, err)
		}
		if taken, misses := c.kernelPool(ctx); taken != 1 || misses != 0 {
			t.Errorf("%s's first session: pool taken %v, misses %v; want a kernel from the pool", c.name, taken, misses)
		}
		d.mu.Lock()
		d.pids[p.pid] = true
		d.mu.Unlock()
		return p
	}
	checkView := func(c *caller, p probe, file string) {
		t.Helper()
		if p.uid < first || p.uid > last || p.home != "/home/user" || p.user != "/home/user" || p.name != "user" || p.file != file || p.alices != "False" || p.spare != "False" {
			t.Errorf("%s's kernel: %+v; want a uid of %d-%d, HOME /home/user, account user, plane file %q, not alice's file, nothing naming a spare", c.name, p, first, last, file)
		}
	}

	// The spare's pool fills before any tenant comes.
	d.waitPoolReady(ctx, 1)
	uids, spares := tenantFolders(t, state)
	if len(uids) != 1 || len(spares) != 1 {
		t.Fatalf("before any tenant: folders %v, want one spare", uids)
	}

	alice := who("alice")
	before := time.Now()
	pa := firstSession(alice)
	start, now := processStart(t, pa.pid)
	elapsed := int64(time.Since(before) / (10 * time.Millisecond))
	if start >= now-elapsed {
		t.Errorf("alice's kernel started at tick %d, after her request (tick %d): not a pooled one", start, now-elapsed)
	}
	checkView(alice, pa, "-")
	alice.run(ctx, "python", "first", "open('/tmp/alice.txt', 'w').write('a')")

	// bob writes through the file plane before his first session: that
	// adopts the (next) spare, and his first kernel, pooled there, sees it.
	d.waitPoolReady(ctx, 2) // alice's refilled pool and the new spare's
	bob := who("bob")
	if st, env := bob.call(ctx, http.MethodPost, "/v2/fs/write", map[string]any{"path": "/tmp/plane.txt", "content": "bob-file"}); st != 200 {
		t.Fatalf("bob's plane write: %d %v", st, env)
	}
	pb := firstSession(bob)
	checkView(bob, pb, "bob-file")
	if pb.uid == pa.uid {
		t.Errorf("alice and bob share uid %d", pa.uid)
	}
	if st, env := alice.call(ctx, http.MethodGet, "/v2/fs/read?path=/tmp/plane.txt", nil); st != 404 {
		t.Errorf("alice reads bob's plane file: %d %v", st, env)
	}
	if cwd := alice.run(ctx, "python", "first", "import os; print(os.getcwd())"); pb.cwd+"\n" != cwd {
		t.Errorf("bob's kernel works in %q, alice's in %q", pb.cwd, cwd)
	}
	// bob's network is the spare's, whose egress proxy now names him.
	got := bob.run(ctx, "python", "first", `import urllib.request
try:
    urllib.request.urlopen("http://bob.example.invalid/", timeout=10)
except Exception as e:
    print(getattr(e, "code", type(e).__name__))`)
	if got != "403\n" || !d.logged(`msg="egress refused" tenant=jwt:bob host=bob.example.invalid`) {
		t.Errorf("bob through the egress proxy: %q; log:\n%s", got, grepLines(d.stderr.String(), "egress"))
	}

	// The spare was replaced: a third new tenant is served from a pool too.
	d.waitPoolReady(ctx, 3)
	carol := who("carol")
	pc := firstSession(carol)
	checkView(carol, pc, "-")
	if !d.logged(`msg="tenant ready" tenant=jwt:carol`) {
		t.Errorf("no log of carol's sandbox:\n%s", d.stderr)
	}

	// A daemon that did not close leaves its spare: the next one removes
	// it, makes its own, and gives it to new tenants only. alice keeps her
	// folder and uid and gets a cold kernel there.
	d.waitPoolReady(ctx, 4)
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.done
	deadline := time.Now().Add(15 * time.Second)
	for _, p := range []probe{pa, pb, pc} {
		for exists(p.pid) {
			if time.Now().After(deadline) {
				t.Fatalf("kernel %d outlived the killed daemon (alive: %v)", p.pid, kerneltest.Alive(p.pid))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	uids, spares = tenantFolders(t, state)
	if len(uids) != 4 || len(spares) != 1 {
		t.Fatalf("after a kill: folders %v, want alice's, bob's, carol's and a spare", uids)
	}
	distinctUIDs(t, uids)
	left := spares[0]

	d = startDaemonEnv(t, env, args...)
	d.token = tenantJWT(t, priv, "metrics")
	alice, dave := who("alice"), who("dave")
	d.waitPoolReady(ctx, 1)
	uids, spares = tenantFolders(t, state)
	if len(uids) != 4 || len(spares) != 1 || spares[0] == left {
		t.Fatalf("after the restart: folders %v; want the old spare %s replaced by one new one", uids, left)
	}
	distinctUIDs(t, uids)
	out := alice.run(ctx, "python", "again", "import os; print(os.getuid(), os.path.exists('/tmp/alice.txt'))")
	if out != fmt.Sprintf("%d True\n", pa.uid) {
		t.Errorf("alice after the restart: %q; want her uid %d and her file", out, pa.uid)
	}
	if taken, misses := alice.kernelPool(ctx); taken != 0 || misses != 1 {
		t.Errorf("alice, seen before the restart, took the spare: taken %v, misses %v", taken, misses)
	}
	d.waitPoolReady(ctx, 2) // alice's pool now, and the spare's
	pd := firstSession(dave)
	checkView(dave, pd, "-")
	for _, p := range []probe{pa, pb, pc} {
		if p.uid == pd.uid {
			t.Errorf("dave got uid %d, already %+v's", pd.uid, p)
		}
	}

	// A daemon that closes removes its spare.
	d.stop()
	uids, spares = tenantFolders(t, state)
	if len(uids) != 4 || len(spares) != 0 {
		t.Errorf("after a clean stop: folders %v, want alice's, bob's, carol's and dave's only; the log's spare and stop lines:\n%s\n%s",
			uids, grepLines(d.stderr.String(), "spare"), grepLines(d.stderr.String(), "stopped"))
	}
	distinctUIDs(t, uids)
}
