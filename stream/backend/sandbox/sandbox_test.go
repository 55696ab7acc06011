package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
	first, last := kerneltest.UIDRange(t)
	ts, err := NewTenants(Config{StateDir: filepath.Join(base, "state"), FirstUID: first, LastUID: last,
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

// TestFilesActInTheTenantsView drives a tenant's file helper as the plane
// would: what it writes is the tenant's, owned by the tenant's uid; a link a
// runtime planted to a root-only file or to / gets the tenant's rights
// there (EACCES, EROFS), never aiod's; another tenant sees none of it.
func TestFilesActInTheTenantsView(t *testing.T) {
	ts, work := newTenants(t, NetworkNone)
	alice, err := ts.Files("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := ts.Files("jwt:bob")
	if err != nil {
		t.Fatal(err)
	}
	f, err := alice.OpenFile("/tmp/a/b.txt", os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("open in a missing folder: %v, want ENOENT", err)
	}
	if err := alice.MkdirAll("/tmp/a", 0o755); err != nil {
		t.Fatal(err)
	}
	if f, err = alice.OpenFile("/tmp/a/b.txt", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("alice's"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	at, _ := ts.Get("jwt:alice")
	host := filepath.Join(at.Dir, "tmp", "a", "b.txt")
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil || st.Uid != at.UID {
		t.Fatalf("the file on the host: %v, owner %d; want the tenant's uid %d", err, st.Uid, at.UID)
	}
	if b, err := alice.ReadFile("/tmp/a/b.txt"); err != nil || string(b) != "alice's" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if _, err := bob.Stat("/tmp/a/b.txt"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("bob sees alice's file: %v", err)
	}
	// Links a runtime could have planted in its own /tmp.
	for link, target := range map[string]string{"shadow": "/etc/shadow", "root": "/", "state": ts.StateDir()} {
		if err := os.Symlink(target, filepath.Join(at.Dir, "tmp", link)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := alice.Open("/tmp/shadow"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("read through a link to /etc/shadow: %v, want EACCES", err)
	}
	if _, err := alice.OpenFile("/tmp/root/etc/aiod-escape", os.O_CREATE|os.O_WRONLY, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write through a link to /: %v, want EROFS", err)
	}
	if _, err := os.Stat("/etc/aiod-escape"); err == nil {
		os.Remove("/etc/aiod-escape")
		t.Fatal("a write through a link landed in the host's /etc")
	}
	if ents, err := alice.ReadDir("/tmp/state"); len(ents) != 0 || err != nil && !errors.Is(err, syscall.ENOENT) {
		t.Errorf("aiod's state directory through a link lists %d entries (%v); want it empty or missing", len(ents), err)
	}
	if _, err := alice.Stat("/etc/hostname"); err != nil {
		t.Errorf("the host's files are readable: %v", err)
	}
	ents, err := alice.ReadDir("/tmp")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "Test") { // the working folder's parents, made for the view
			names = append(names, e.Name())
		}
	}
	if strings.Join(names, ",") != "a,root,shadow,state" {
		t.Errorf("listing of /tmp: %v", names)
	}
	if err := alice.MkdirAll(filepath.Join(work, "sub"), 0o755); err != nil {
		t.Fatalf("the working folder is the tenant's: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, "sub")); err == nil {
		t.Error("a folder made in the working folder reached the host's")
	}
	if err := alice.RemoveAll("/tmp/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(host); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed file still there: %v", err)
	}
	pid := alice.PID()
	// The helper lives as long as the tenant: its command line, which ps
	// and the tenant's own code can read, does not carry its plan (the
	// tenant's host folders, the seccomp program).
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || len(cmdline) > 200 ||
		strings.Contains(string(cmdline), ts.StateDir()) || strings.Contains(string(cmdline), "{") {
		t.Errorf("the file helper's command line (%v): %q", err, cmdline)
	}
	alice.Close()
	if pid == 0 || syscall.Kill(pid, 0) == nil {
		t.Errorf("helper pid %d still runs after Close", pid)
	}
}

// TestNetnsLeavesAiodInItsOwn makes many tenants' network namespaces and
// checks that aiod itself stays in its own: the main thread (what /proc/net
// shows) and every thread.
func TestNetnsLeavesAiodInItsOwn(t *testing.T) {
	before, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := newTenants(t, NetworkNone)
	for i := 0; i < 20; i++ {
		if _, err := ts.Get("jwt:t" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/ns/net")
	for _, task := range tasks {
		if ns, err := os.Readlink(task); err == nil && ns != before {
			t.Errorf("%s is %s, not aiod's %s", task, ns, before)
		}
	}
}

// A tenant's code may kill its own file helper (it runs as the tenant's
// uid) while aiod lists a large folder through it: the listing fails or
// completes, the next call gets a new helper, and aiod never panics (the
// helper's waiter closed the reply channel the reader was sending on).
func TestFilesHelperKilledMidListing(t *testing.T) {
	ts, _ := newTenants(t, NetworkNone)
	alice, err := ts.Files("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.MkdirAll("/tmp/many", 0o755); err != nil {
		t.Fatal(err)
	}
	at, _ := ts.Get("jwt:alice")
	for i := range 4 * filesBatch {
		if err := os.WriteFile(filepath.Join(at.Dir, "tmp", "many", fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	failed := 0
	for i := range 30 {
		// A helper up, though the last one may be dying (a kill that
		// landed after its listing ended): a read is asked again.
		if _, err := alice.Stat("/tmp"); err != nil {
			t.Fatal(err)
		}
		pid := alice.PID()
		done := make(chan error, 1)
		go func() {
			_, err := alice.ReadDir("/tmp/many")
			done <- err
		}()
		// Kills from 0 to 300 ms into the listing (one takes about that
		// here): time for it to go wrong at each stage of it.
		time.Sleep(time.Duration(i) * 10 * time.Millisecond)
		syscall.Kill(pid, syscall.SIGKILL)
		if err := <-done; err != nil {
			failed++
		}
	}
	ents, err := alice.ReadDir("/tmp/many")
	if err != nil || len(ents) != 4*filesBatch {
		t.Fatalf("listing after the kills: %d entries, %v", len(ents), err)
	}
	t.Logf("%d of 30 listings failed by the kill (reads are asked again of a new helper)", failed)
}

// A runtime's pseudo-terminals come from a devpts of its own, capped at
// View.Ptys: a tenant opening them until it cannot stops there, and its
// /dev/pts lists its own and nothing of the host's (where root and aiod's
// terminals open theirs).
func TestRuntimePtysAreCapped(t *testing.T) {
	ts, work := newTenants(t, NetworkNone)
	alice, err := ts.Get("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	v := alice.View()
	v.Ptys = 12
	cmd := exec.Command("/usr/bin/python3", "-c", `import os
fds = []
try:
    for i in range(40):
        fds.extend(os.openpty())
except OSError as e:
    print(len(fds) // 2, e.errno, len([n for n in os.listdir("/dev/pts") if n.isdigit()]))`)
	cmd.Dir = work
	cmd.Env = []string{"HOME=" + HomePath, "PATH=/usr/bin:/bin"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	Wrap(cmd, v.RuntimePlan(false, ""), alice.Files())
	if err := cmd.Run(); err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr.String())
	}
	want := fmt.Sprintf("12 %d 12", int(syscall.ENOSPC))
	if got := strings.TrimSpace(stdout.String()); got != want {
		t.Fatalf("ptys opened under a cap of 12 (opened, errno, listed in /dev/pts): %q, want %q (stderr %s)", got, want, stderr.String())
	}
}
