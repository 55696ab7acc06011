package sandbox

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/aiod/aiod/kernel/kerneltest"
)

func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }

// newTenants makes a state directory and a working folder for one test.
func newTenants(t *testing.T, network string) (*Tenants, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("tenant sandboxes need root (CI runs as root)")
	}
	base := t.TempDir()
	work := filepath.Join(base, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	ts, err := NewTenants(Config{StateDir: filepath.Join(base, "state"), FirstUID: 2000000000, LastUID: 2000000099,
		Workdir: work, Network: network})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close() })
	return ts, work
}

// probe is Python run inside a sandbox; it prints one JSON object of what
// it could and could not do.
const probe = `
import json, os, socket, sys, errno, ctypes
out = {}
def attempt(name, f):
    try:
        f(); out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
out["uid"], out["gid"] = os.getuid(), os.getgid()
out["cwd"] = os.getcwd()
out["home"] = os.environ.get("HOME")
attempt("write_tmp", lambda: open("/tmp/probe.txt", "w").write("tenant"))
attempt("write_etc", lambda: open("/etc/probe.txt", "w").write("x"))
attempt("write_work", lambda: open("work.txt", "w").write("w"))
attempt("write_home", lambda: open("/home/user/h.txt", "w").write("h"))
attempt("read_shadow", lambda: open("/etc/shadow").read())
attempt("kill_parent", lambda: os.kill(int(sys.argv[1]), 0))
attempt("connect_host", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2))
def loop():
    l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
    c = socket.create_connection(l.getsockname(), timeout=2); c.close(); l.close()
attempt("own_loopback", loop)
libc = ctypes.CDLL(None, use_errno=True)
def mount():
    if libc.mount(b"tmpfs", b"/mnt", b"tmpfs", 0, None) != 0:
        raise OSError(ctypes.get_errno(), "mount")
attempt("mount", mount)
def unshare():
    if libc.unshare(0x10000000) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
attempt("unshare_user", unshare)
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
out["state_listing"] = os.listdir(sys.argv[3]) if os.path.isdir(sys.argv[3]) else None
st = {}
for line in open("/proc/self/status"):
    k, _, v = line.partition(":")
    st[k] = v.strip()
out["cap_eff"], out["no_new_privs"], out["seccomp"] = st["CapEff"], st["NoNewPrivs"], st["Seccomp"]
import pwd
out["user"] = pwd.getpwuid(os.getuid()).pw_name
print(json.dumps(out))
`

func TestWrappedProcessIsConfined(t *testing.T) {
	ts, work := newTenants(t, NetworkNone)
	alice, err := ts.Get("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	cmd := exec.Command("/usr/bin/python3", "-c", probe, strconv.Itoa(os.Getpid()), strconv.Itoa(port), ts.StateDir())
	cmd.Dir = work
	cmd.Env = []string{"HOME=" + HomePath, "PATH=/usr/bin:/bin"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	Wrap(cmd, alice.View().RuntimePlan(false, ""), alice.Files())
	if err := cmd.Run(); err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr.String())
	}
	var got map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("probe output %q: %v (stderr %s)", stdout.String(), err, stderr.String())
	}
	want := map[string]any{
		"uid": float64(alice.UID), "gid": float64(alice.GID), "cwd": work, "home": HomePath,
		"write_tmp": "ok", "write_etc": "EROFS", "write_work": "ok", "write_home": "ok",
		"read_shadow": "EACCES", "kill_parent": "EPERM", "connect_host": "ECONNREFUSED", "own_loopback": "ok",
		"mount": "EPERM", "unshare_user": "EPERM", "cap_eff": "0000000000000000", "no_new_privs": "1", "seccomp": "2",
		"user": UserName,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if l, ok := got["state_listing"].([]any); ok && len(l) > 0 {
		t.Errorf("the state directory shows %v inside the sandbox", l)
	}
	if pids, _ := got["pids"].([]any); len(pids) != 1 {
		t.Errorf("/proc lists %v; want only the probe itself", pids)
	}
	if _, err := os.Stat("/tmp/probe.txt"); err == nil {
		t.Error("the probe's /tmp file reached the host's /tmp")
	}
	b, err := os.ReadFile(filepath.Join(alice.Dir, "tmp", "probe.txt"))
	if err != nil || string(b) != "tenant" {
		t.Errorf("the tenant's tmp holds %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(work, "work.txt")); err == nil {
		t.Error("the probe's work file reached the host's working folder")
	}
	if _, err := os.Stat(filepath.Join(alice.Dir, "work", "work.txt")); err != nil {
		t.Errorf("the tenant's work folder: %v", err)
	}
	t.Logf("probe: %s", stdout.String())
}
