package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
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
	"github.com/golang-jwt/jwt/v5"
)

// tenantKey makes an Ed25519 key pair; the daemon verifies JWTs with the
// public half.
func tenantKey(t *testing.T) (ed25519.PrivateKey, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(pub)
	return priv, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func tenantJWT(t *testing.T, priv ed25519.PrivateKey, sub string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// caller is one tenant's client of a daemon.
type caller struct {
	t     *testing.T
	d     *daemon
	name  string
	token string
}

// call sends a request (body JSON) with the caller's token, if it has
// one, and returns the status and the decoded envelope.
func (c *caller) call(ctx context.Context, method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	st, env, _ := c.callWithHeader(ctx, method, path, body)
	return st, env
}

// callWithHeader is call, with the answer's headers too.
func (c *caller) callWithHeader(ctx context.Context, method, path string, body any) (int, map[string]any, http.Header) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.d.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.d.client.Do(req)
	if err != nil {
		c.t.Fatalf("%s: %s %s: %v", c.name, method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env map[string]any
	_ = json.Unmarshal(raw, &env)
	if env == nil {
		env = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, env, resp.Header
}

// py runs Python in session sid ("" one-shot) and returns stdout; a call
// that does not answer ok fails the test.
func (c *caller) run(ctx context.Context, lang, sid, code string) string {
	c.t.Helper()
	body := map[string]any{"language": lang, "code": code, "timeout": 60}
	if sid != "" {
		body["session_id"] = sid
	}
	st, env := c.call(ctx, http.MethodPost, "/v2/code/execute", body)
	data, _ := env["data"].(map[string]any)
	if st != 200 || data == nil || data["status"] != "ok" {
		c.t.Fatalf("%s: %s in %q: %d %v", c.name, lang, sid, st, env)
	}
	out, _ := data["stdout"].(string)
	return out
}

// tenantUIDRange is the --tenant-uids range d runs with (the tests give
// each daemon a range of its own, in AIO_TENANT_UIDS).
func tenantUIDRange(t *testing.T, d *daemon) (first, last int) {
	t.Helper()
	for _, e := range d.cmd.Env {
		if v, ok := strings.CutPrefix(e, "AIO_TENANT_UIDS="); ok {
			if _, err := fmt.Sscanf(v, "%d-%d", &first, &last); err == nil {
				return first, last
			}
		}
	}
	t.Fatalf("the daemon runs without AIO_TENANT_UIDS: %v", d.cmd.Env)
	return 0, 0
}

// TestTenantsCannotReachEachOther runs alice and bob (two JWT subjects) on
// one daemon with the default isolation, and walks through every hole
// issue 22 found: each is closed.
func TestTenantsCannotReachEachOther(t *testing.T) {
	t.Parallel()
	priv, pub := tenantKey(t)
	d := startDaemonEnv(t, []string{"AIO_JWT_PUBLIC_KEY=" + pub}, "--code-backend", "kernel")
	alice := &caller{t: t, d: d, name: "alice", token: tenantJWT(t, priv, "alice")}
	bob := &caller{t: t, d: d, name: "bob", token: tenantJWT(t, priv, "bob")}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Both name their session "a1": two sessions, two kernels, two uids.
	aliceInfo := alice.run(ctx, "python", "a1", "import os; secret = 'alice-secret'; open('/tmp/secret.txt', 'w').write('alice-file')\nprint(os.getpid(), os.getuid())")
	bobInfo := bob.run(ctx, "python", "a1", "import os; print(os.getpid(), os.getuid())")
	var alicePID, aliceUID, bobPID, bobUID int
	fmt.Sscan(aliceInfo, &alicePID, &aliceUID)
	fmt.Sscan(bobInfo, &bobPID, &bobUID)
	first, last := tenantUIDRange(t, d)
	inRange := func(uid int) bool { return uid >= first && uid <= last }
	if alicePID == bobPID || aliceUID == bobUID || !inRange(aliceUID) || !inRange(bobUID) {
		t.Fatalf("alice %q and bob %q share a kernel or a uid, or run outside the tenant range", aliceInfo, bobInfo)
	}
	// Host pids as aiod reports them (the kernels' own view is the same
	// pid namespace).
	if got := bob.run(ctx, "python", "a1", "print(repr(globals().get('secret')))"); got != "None\n" {
		t.Errorf("bob's a1 sees alice's variable: %q", got)
	}

	t.Run("files through code", func(t *testing.T) {
		got := bob.run(ctx, "python", "a1", "import os; print(os.path.exists('/tmp/secret.txt'), os.listdir('/tmp'))")
		if !strings.HasPrefix(got, "False") {
			t.Errorf("bob's session sees alice's /tmp: %q", got)
		}
		if _, err := os.Stat("/tmp/secret.txt"); err == nil {
			t.Error("alice's /tmp file reached the host's /tmp")
		}
	})
	t.Run("files through the plane", func(t *testing.T) {
		if st, env := bob.call(ctx, http.MethodGet, "/v2/fs/read?path=/tmp/secret.txt", nil); st != 404 {
			t.Errorf("bob reads alice's file through the plane: %d %v", st, env)
		}
		st, env := alice.call(ctx, http.MethodGet, "/v2/fs/read?path=/tmp/secret.txt", nil)
		if data, _ := env["data"].(map[string]any); st != 200 || data["content"] != "alice-file" {
			t.Errorf("alice's own plane read: %d %v", st, env)
		}
		// A file written through the plane is the one the session opens.
		if st, _ := bob.call(ctx, http.MethodPost, "/v2/fs/write", map[string]any{"path": "/tmp/bob.txt", "content": "from the plane"}); st != 200 {
			t.Fatalf("bob's plane write: %d", st)
		}
		if got := bob.run(ctx, "python", "a1", "print(open('/tmp/bob.txt').read())"); got != "from the plane\n" {
			t.Errorf("bob's session reads %q", got)
		}
		if got := alice.run(ctx, "python", "a1", "import os; print(os.path.exists('/tmp/bob.txt'))"); got != "False\n" {
			t.Errorf("alice sees bob's plane file: %q", got)
		}
	})
	t.Run("proc and signals", func(t *testing.T) {
		code := fmt.Sprintf(`import os
def kill(p):
    try:
        os.kill(p, 0); return "ok"
    except OSError as e:
        return type(e).__name__
print(str(%d) in os.listdir("/proc"), str(%d) in os.listdir("/proc"), kill(%d), kill(%d), kill(1))`, alicePID, d.cmd.Process.Pid, alicePID, d.cmd.Process.Pid)
		if got := bob.run(ctx, "python", "a1", code); got != "False False PermissionError PermissionError PermissionError\n" {
			t.Errorf("bob on alice's kernel and aiod: %q; want both invisible and unsignalable", got)
		}
	})
	t.Run("connection files and stolen keys", func(t *testing.T) {
		conn := kernelConnectionFile(t, alicePID)
		var info map[string]any
		if err := json.Unmarshal(conn, &info); err != nil {
			t.Fatalf("alice's connection file: %v", err)
		}
		// bob's code has alice's key (say it leaked): her sockets are not in
		// his view, and the same path there is his own kernel's.
		code := fmt.Sprintf(`import glob, json, os
info = json.loads(%q)
print(sorted(glob.glob("/tmp/aiod-kernel-*")), os.path.exists(%q))
from jupyter_client import BlockingKernelClient
kc = BlockingKernelClient()
kc.load_connection_info(info)
kc.start_channels()
try:
    kc.wait_for_ready(timeout=5)
    print("connected")
except RuntimeError as e:
    print("refused")
finally:
    kc.stop_channels()`, string(conn), filepath.Dir(kernelDirOf(t, alicePID)))
		if got := bob.run(ctx, "python", "", code); got != "[] False\nrefused\n" {
			t.Errorf("bob with alice's connection file: %q", got)
		}
	})
	t.Run("writes outside the writable folders", func(t *testing.T) {
		code := `import errno
for p in ["/etc/aiod-x", "/usr/aiod-x", "/var/lib/aiod-x", "/root/aiod-x", "/opt/aiod-x"]:
    try:
        open(p, "w").write("x"); print(p, "written")
    except OSError as e:
        print(p, errno.errorcode[e.errno])`
		got := alice.run(ctx, "python", "a1", code)
		if strings.Contains(got, "written") {
			t.Errorf("a write left the view: %q", got)
		}
		for _, p := range []string{"/etc/aiod-x", "/usr/aiod-x", "/var/lib/aiod-x", "/root/aiod-x", "/opt/aiod-x"} {
			if _, err := os.Stat(p); err == nil {
				os.Remove(p)
				t.Errorf("%s reached the host", p)
			}
		}
	})
	t.Run("mount", func(t *testing.T) {
		code := `import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
print(libc.mount(b"tmpfs", b"/mnt", b"tmpfs", 0, None), errno.errorcode[ctypes.get_errno()])`
		if got := alice.run(ctx, "python", "a1", code); got != "-1 EPERM\n" {
			t.Errorf("mount from a session: %q", got)
		}
	})
	t.Run("the plane refuses shadow and link escapes", func(t *testing.T) {
		if st, _ := alice.call(ctx, http.MethodGet, "/v2/fs/download?path=/etc/shadow", nil); st != 403 {
			t.Errorf("download /etc/shadow: %d, want 403", st)
		}
		alice.run(ctx, "python", "a1", "import os\nfor n, to in [('s1', '/etc/shadow'), ('root', '/')]:\n    p = '/tmp/' + n\n    os.path.lexists(p) or os.symlink(to, p)")
		if st, _ := alice.call(ctx, http.MethodGet, "/v2/fs/download?path=/tmp/s1", nil); st != 403 {
			t.Errorf("download through a link to /etc/shadow: %d, want 403", st)
		}
		if st, _ := alice.call(ctx, http.MethodPost, "/v2/fs/write", map[string]any{"path": "/tmp/root/etc/aiod-escape", "content": "x"}); st == 200 {
			t.Error("a write through a link to / was accepted")
		}
		if _, err := os.Stat("/etc/aiod-escape"); err == nil {
			os.Remove("/etc/aiod-escape")
			t.Error("a plane write through a link reached the host's /etc")
		}
	})
	t.Run("network", func(t *testing.T) {
		port := strings.TrimPrefix(d.url, "http://127.0.0.1:")
		code := fmt.Sprintf(`import socket
def connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close(); return "connected"
    except OSError as e:
        return type(e).__name__
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
print(connect(%s), connect(l.getsockname()[1]))`, port)
		if got := alice.run(ctx, "python", "a1", code); got != "ConnectionRefusedError connected\n" {
			t.Errorf("aiod's port from a session, then its own loopback: %q", got)
		}
	})
	t.Run("one tenant's sessions share files; javascript and one-shots in the view", func(t *testing.T) {
		alice.run(ctx, "python", "a2", "open('/tmp/shared.txt', 'w').write('a2')")
		if got := alice.run(ctx, "python", "a1", "print(open('/tmp/shared.txt').read())"); got != "a2\n" {
			t.Errorf("alice's a1 reads %q", got)
		}
		js := "const fs = require('fs'); console.log(process.getuid(), fs.existsSync('/tmp/secret.txt'), fs.existsSync('/tmp/bob.txt'))"
		if got := bob.run(ctx, "javascript", "j", js); got != fmt.Sprintf("%d false true\n", bobUID) {
			t.Errorf("bob's javascript session: %q", got)
		}
		if got := alice.run(ctx, "javascript", "", js); got != fmt.Sprintf("%d true false\n", aliceUID) {
			t.Errorf("alice's one-shot javascript: %q", got)
		}
		if got := bob.run(ctx, "python", "", "import os; print(os.getuid(), os.path.exists('/tmp/secret.txt'))"); got != fmt.Sprintf("%d False\n", bobUID) {
			t.Errorf("bob's one-shot python: %q", got)
		}
	})
	t.Run("the walkthrough for both at once", func(t *testing.T) {
		var wg sync.WaitGroup
		for _, c := range []*caller{alice, bob} {
			wg.Go(func() {
				out := t.TempDir()
				cmd := exec.CommandContext(ctx, "/usr/bin/python3", "../../examples/walkthrough.py", d.url, out)
				cmd.Env = append(cleanEnv(), "AIO_TOKEN="+c.token)
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s's walkthrough: %v\n%s", c.name, err, b)
				}
			})
		}
		wg.Wait()
	})
}

// kernelDirOf is the host path of a kernel's connection file: its
// mount at /run/aiod/kernel names the folder it came from (mountinfo's
// root field, a path in the host's root file system here).
func kernelDirOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/run/aiod/kernel" {
			return filepath.Join(f[3], "kernel.json")
		}
	}
	t.Fatalf("kernel %d has no /run/aiod/kernel mount:\n%s", pid, b)
	return ""
}

func kernelConnectionFile(t *testing.T, pid int) []byte {
	t.Helper()
	b, err := os.ReadFile(kernelDirOf(t, pid))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIsolationNoneSharesTheHost keeps today's behaviour under --isolation
// none: names are still the tenant's (bob's a1 is his own), but both run
// as aiod's user on one file system, so bob reads alice's /tmp file, sees
// her kernel in /proc and can signal it; /v2/code/info says so.
func TestIsolationNoneSharesTheHost(t *testing.T) {
	t.Parallel()
	priv, pub := tenantKey(t)
	d := startDaemonEnv(t, []string{"AIO_JWT_PUBLIC_KEY=" + pub}, "--code-backend", "kernel", "--isolation", "none")
	alice := &caller{t: t, d: d, name: "alice", token: tenantJWT(t, priv, "alice")}
	bob := &caller{t: t, d: d, name: "bob", token: tenantJWT(t, priv, "bob")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := filepath.Join(t.TempDir(), "alice.txt")
	info := alice.run(ctx, "python", "a1", fmt.Sprintf("import os; x = 1; open(%q, 'w').write('alice'); print(os.getpid(), os.getuid())", name))
	var pid, uid int
	fmt.Sscan(info, &pid, &uid)
	got := bob.run(ctx, "python", "a1", fmt.Sprintf("import os\nprint('x' in globals(), open(%q).read(), str(%d) in os.listdir('/proc'), os.getuid())\nos.kill(%d, 0)", name, pid, pid))
	if got != fmt.Sprintf("False alice True %d\n", uid) {
		t.Errorf("bob under --isolation none: %q; want his own session, alice's file and kernel reachable", got)
	}
	_, env := bob.call(ctx, http.MethodGet, "/v2/code/info", nil)
	iso, _ := env["data"].(map[string]any)["isolation"].(map[string]any)
	if iso["mode"] != "none" || iso["why"] != "--isolation none" {
		t.Errorf("info isolation: %v", iso)
	}
}

// TestRuntimesCannotUseAiodsRights: where runtimes can reach aiod's port
// (the host's network under tenant isolation, or --runtime-user without
// it), a request from a runtime is refused without credentials configured
// (so it cannot read a root-only file through the plane), and needs the
// token like anyone else when one is.
func TestRuntimesCannotUseAiodsRights(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "root-only")
	if err := os.WriteFile(secret, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	probe := func(url, token string) string {
		return fmt.Sprintf(`import urllib.request, urllib.error
req = urllib.request.Request(%q)
if %q:
    req.add_header("Authorization", "Bearer " + %q)
try:
    print(urllib.request.urlopen(req, timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)`, url, token, token)
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"tenant, host network", []string{"--runtime-network", "host"}},
		{"none, runtime user", []string{"--isolation", "none", "--runtime-user", "nobody"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := startDaemon(t, append([]string{"--code-backend", "kernel"}, c.args...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			read := d.url + "/v2/fs/read?path=" + secret
			if got := d.execute(ctx, "", probe(read, ""), 30).Stdout; got != "403\n" {
				t.Errorf("a runtime reading %s through aiod: %q, want 403", secret, got)
			}
			if got := d.execute(ctx, "", probe(d.url+"/v2/code/info", ""), 30).Stdout; got != "403\n" {
				t.Errorf("a runtime calling aiod: %q, want 403", got)
			}
			// The caller itself, from outside, is served.
			if got := d.execute(ctx, "", "print(1)", 30).Stdout; got != "1\n" {
				t.Errorf("the caller: %q", got)
			}
		})
	}
	t.Run("with a token", func(t *testing.T) {
		d := startDaemonEnv(t, []string{"AIO_TOKEN=tok-runtime"}, "--code-backend", "kernel", "--runtime-network", "host")
		d.token = "tok-runtime"
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if got := d.execute(ctx, "", probe(d.url+"/v2/code/info", ""), 30).Stdout; got != "401\n" {
			t.Errorf("a runtime without the token: %q, want 401", got)
		}
		if got := d.execute(ctx, "", probe(d.url+"/v2/code/info", "tok-runtime"), 30).Stdout; got != "200\n" {
			t.Errorf("a runtime given the token: %q, want 200", got)
		}
	})
}

// TestTemplateCannotBeTraced: every later kernel starts from the kernel
// template's memory, so no session may PTRACE_ATTACH it: under tenant
// isolation (another uid, ptrace denied), and without it as the runtime
// user the template runs as (it is not dumpable).
func TestTemplateCannotBeTraced(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"--isolation", "none", "--runtime-user", "nobody"}} {
		t.Run(strings.Join(append([]string{"isolation"}, args...), " "), func(t *testing.T) {
			d := startDaemon(t, append([]string{"--code-backend", "kernel"}, args...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var info envelope[struct {
				KernelStart struct {
					Templates []struct {
						PID int `json:"pid"`
					} `json:"templates"`
				} `json:"kernel_start"`
			}]
			d.execute(ctx, "", "1", 30) // the template is ready once a kernel ran
			d.do(ctx, http.MethodGet, "/v2/code/info", nil, &info)
			if len(info.Data.KernelStart.Templates) == 0 || info.Data.KernelStart.Templates[0].PID == 0 {
				t.Fatalf("no template: %+v", info.Data)
			}
			pid := info.Data.KernelStart.Templates[0].PID
			code := fmt.Sprintf(`import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(16, %d, None, None)  # PTRACE_ATTACH
print(r, errno.errorcode.get(ctypes.get_errno()))
if r == 0:
    libc.ptrace(17, %d, None, None)  # PTRACE_DETACH`, pid, pid)
			if got := d.execute(ctx, "", code, 30).Stdout; got != "-1 EPERM\n" {
				d.do(ctx, http.MethodGet, "/v2/code/info", nil, &info)
				t.Errorf("PTRACE_ATTACH of the template (pid %d): %q, want -1 EPERM; templates now %+v; the log's template lines:\n%s",
					pid, got, info.Data.KernelStart.Templates, grepLines(d.stderr.String(), "template"))
			}
		})
	}
}

// TestEgressAllowList runs tenants with --runtime-network allow: their one
// way out is aiod's proxy, which lets through the listed destination
// (plain HTTP and a CONNECT tunnel) and refuses another port of the same
// host; a direct connection has no route.
func TestEgressAllowList(t *testing.T) {
	t.Parallel()
	hostIP := ""
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			hostIP = p.Addr().String()
			break
		}
	}
	if hostIP == "" {
		t.Fatal("no non-loopback IPv4 address on this machine to serve the destination on")
	}
	serve := func(body string) int {
		ln, err := net.Listen("tcp", hostIP+":0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().(*net.TCPAddr).Port
	}
	allowed, other := serve("allowed"), serve("other")
	d := startDaemon(t, "--code-backend", "kernel", "--runtime-network", "allow",
		"--egress-allow", fmt.Sprintf("%s:%d,*.example.com:443", hostIP, allowed))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := fmt.Sprintf(`import os, socket, urllib.request, urllib.error
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return str(e.code)
def direct():
    try:
        socket.create_connection((%q, %d), timeout=3); return "connected"
    except OSError as e:
        return type(e).__name__
def tunnel():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n")
    head = s.recv(4096).split(b"\r\n")[0].decode()
    s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    data = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        data += b
    return head + "|" + data.decode().split("\r\n\r\n", 1)[-1]
print(os.environ.get("HTTPS_PROXY"))
print(get("http://%s:%d/"), get("http://%s:%d/"), direct())
print(tunnel())`, hostIP, allowed, hostIP, allowed, hostIP, allowed, hostIP, allowed, hostIP, other)
	got := d.execute(ctx, "", code, 60).Stdout
	t.Logf("a session's egress:\n%s", got)
	want := fmt.Sprintf("http://127.0.0.1:3128\nallowed 403 OSError\nHTTP/1.1 200 Connection established|allowed\n")
	if !strings.HasPrefix(got, "http://127.0.0.1:3128\nallowed 403 ") || !strings.HasSuffix(got, "HTTP/1.1 200 Connection established|allowed\n") || strings.Contains(got, "connected") {
		t.Errorf("egress from a session:\n%s\nwant like\n%s", got, want)
	}
	var info envelope[struct {
		Isolation struct {
			Network    string   `json:"network"`
			Namespaces []string `json:"namespaces"`
		} `json:"isolation"`
	}]
	d.do(ctx, http.MethodGet, "/v2/code/info", nil, &info)
	if info.Data.Isolation.Network != "allow" || !strings.Contains(strings.Join(info.Data.Isolation.Namespaces, " "), "1 refused") {
		t.Errorf("info: %+v", info.Data.Isolation)
	}
}

// TestPlaneHasTheRuntimeUsersRights: with --runtime-user nobody (and no
// tenant isolation) the file plane acts as nobody too: a root-only file,
// or a link a runtime planted to it, is 403; what the plane writes is
// nobody's.
func TestPlaneHasTheRuntimeUsersRights(t *testing.T) {
	t.Parallel()
	work, err := os.MkdirTemp("", "aiod-plane-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o777); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(work, "root-only")
	if err := os.WriteFile(secret, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--isolation", "none", "--runtime-user", "nobody", "--workdir", work)
	c := &caller{t: t, d: d, name: "caller"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if st, env := c.call(ctx, http.MethodGet, "/v2/fs/read?path="+secret, nil); st != 403 {
		t.Errorf("read a root-only file through the plane: %d %v", st, env)
	}
	c.run(ctx, "python", "", fmt.Sprintf("import os; os.symlink(%q, %q)", "/etc/shadow", filepath.Join(work, "link")))
	if st, env := c.call(ctx, http.MethodGet, "/v2/fs/download?path="+filepath.Join(work, "link"), nil); st != 403 {
		t.Errorf("download through a link to /etc/shadow: %d %v", st, env)
	}
	if st, env := c.call(ctx, http.MethodPost, "/v2/fs/write", map[string]any{"path": filepath.Join(work, "new.txt"), "content": "x"}); st != 200 {
		t.Fatalf("write: %d %v", st, env)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(work, "new.txt"), &st); err != nil || st.Uid != 65534 {
		t.Errorf("the plane's file: %v, owner %d; want nobody's", err, st.Uid)
	}
	if st, _ := c.call(ctx, http.MethodPost, "/v2/fs/write", map[string]any{"path": "/etc/aiod-plane-x", "content": "x"}); st != 403 {
		t.Errorf("write in /etc as nobody: %d", st)
		os.Remove("/etc/aiod-plane-x")
	}
}

// A tenant's runtime opens pseudo-terminals in a devpts of its own, up to
// --runtime-ptys: 700 attempted in a forked kernel stop at the cap, its
// /dev/pts lists its own only, and a terminal still opens.
func TestRuntimePtysCappedPerRuntime(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--isolation", "tenant", "--runtime-ptys", "64")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	got := d.execute(ctx, "ptys", `import os, errno
fds = []
try:
    for i in range(700):
        fds.extend(os.openpty())
except OSError as e:
    print(len(fds) // 2, errno.errorcode[e.errno], len([n for n in os.listdir("/dev/pts") if n.isdigit()]))
for f in fds:
    os.close(f)`, 60)
	if strings.TrimSpace(got.Stdout) != "64 ENOSPC 64" { // opened, why it stopped, its /dev/pts
		t.Fatalf("ptys a kernel opened under --runtime-ptys 64: %q (stderr %.300q)", got.Stdout, got.Stderr)
	}
	if d.openTerminal(ctx) == "" {
		t.Fatal("no terminal after a runtime took all its ptys")
	}
}

// TestPlantedStartupCodeIsLimitedAndEnds plays a tenant that plants code
// running before its runtimes' first execution, an IPython startup file in
// its home and a NODE_OPTIONS preload, each leaving a process in a session
// of its own. The planted code runs in the runtime's own cgroups; its
// process ends within seconds of the session's DELETE, and when aiod stops.
func TestPlantedStartupCodeIsLimitedAndEnds(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--isolation", "tenant", "--kernel-prewarm", "0")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	home := strings.TrimSpace(d.execute(ctx, "plant", kerneltest.PlantStartupCode, 60).Stdout)
	own := "/aiod-" + strconv.Itoa(d.cmd.Process.Pid) + "/"
	// victim starts a session of lang whose start runs the planted code and
	// returns the pid of the process it left, after checking where it ran.
	victim := func(lang, sid string) int {
		t.Helper()
		body := map[string]any{"language": lang, "session_id": sid, "timeout": 60, "code": kerneltest.ReadPlanted(lang, home)}
		if lang == "javascript" {
			body["env"] = map[string]string{"NODE_OPTIONS": "--require " + home + "/plant.js"}
		}
		var env envelope[execData]
		d.do(ctx, http.MethodPost, "/v2/code/execute", body, &env)
		cg, stray, ok := strings.Cut(strings.TrimSpace(env.Data.Stdout), "@")
		if !ok {
			t.Fatalf("%s: the planted code left nothing: %+v", lang, env)
		}
		if out := kerneltest.OutsideGroups(cg, own); len(out) > 0 {
			t.Errorf("%s: the planted code ran outside its runtime's %v cgroups:\n%s", lang, out, cg)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(stray))
		if err != nil {
			t.Fatalf("%s: stray pid %q", lang, stray)
		}
		return pid
	}
	ends := func(what string, pid int) {
		t.Helper()
		if !kerneltest.Ends(pid, 10*time.Second) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the planted code's process %d outlived %s by 10 s", pid, what)
		}
	}
	for _, lang := range []string{"python", "javascript"} {
		pid := victim(lang, "victim-"+lang)
		var closed envelope[map[string]any]
		d.do(ctx, http.MethodDelete, "/v2/code/sessions/victim-"+lang, nil, &closed)
		ends("its session's DELETE", pid)
	}
	pids := []int{victim("python", "kept-python"), victim("javascript", "kept-javascript")}
	d.stop()
	for _, pid := range pids {
		ends("aiod's stop", pid)
	}
}
