package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// restart stops d with SIGTERM and starts a daemon with the same
// arguments and environment (its state directory and tenant uids among
// them).
func restart(t *testing.T, d *daemon, env []string, args ...string) *daemon {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(60 * time.Second); code != 0 {
		t.Fatalf("aiod exited %d after SIGTERM; stderr:\n%s", code, d.stderr)
	}
	for _, e := range d.cmd.Env {
		if strings.HasPrefix(e, "AIO_TENANT_UIDS=") {
			env = append(env, e)
		}
	}
	return startDaemonEnv(t, env, args...)
}

// An execution finished before a restart is fetched by id after it, with
// its outputs, from the same state directory.
func TestExecutionSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"--state-dir", t.TempDir()}
	d := startDaemon(t, args...)
	var env envelope[struct {
		execData
		ExecutionID string `json:"execution_id"`
	}]
	d.do(ctx, http.MethodPost, "/v2/code/execute", map[string]any{"language": "python", "session_id": "keep",
		"execution_id": "before-restart", "code": "print('kept across', 'restarts')"}, &env)
	if env.Data.Stdout != "kept across restarts\n" || env.Data.ExecutionID != "before-restart" {
		t.Fatalf("execute: %+v", env)
	}
	d = restart(t, d, nil, args...)
	var got envelope[struct {
		execData
		State       string `json:"state"`
		ExecutionID string `json:"execution_id"`
	}]
	d.do(ctx, http.MethodGet, "/v2/code/executions/before-restart", nil, &got)
	if !got.Success || got.Data.State != "done" || got.Data.Stdout != "kept across restarts\n" || got.Data.Status != "ok" {
		t.Fatalf("after the restart: %+v", got)
	}
}

// labSetup is the namespace of the snapshot test: a 100,000-row
// DataFrame, a function, a class instance, a lambda, numpy, an open file
// and a generator.
const labSetup = `import numpy as np
import pandas as pd
df = pd.DataFrame({"a": np.arange(100000), "b": np.arange(100000) * 0.5, "c": ["r%d" % i for i in range(100000)]})
def double(x):
    return 2 * x
class Counter:
    def __init__(self):
        self.n = 0
    def inc(self):
        self.n += 1
        return self.n
counter = Counter()
counter.inc()
square = lambda x: x * x
fh = open("notes.txt", "w")
fh.write("first\n")
fh.flush()
gen = (i for i in range(10))
total = 42
print(len(df))
`

// labCheck prints what the state holds.
const labCheck = `print(total, len(df), int(df.b.sum()), double(4), counter.inc(), square(3), np.__name__, fh.closed, 'gen' in globals())`

// snapshotFiles returns the snapshot files of tenant's session sid in
// stateDir, oldest first.
func snapshotFiles(t *testing.T, stateDir, tenant, sid string) []string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(stateDir, "snapshots", "*", "*", "*.snap"))
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 14 {
			continue
		}
		n := binary.BigEndian.Uint32(b[10:14])
		var h struct {
			SessionID string `json:"session_id"`
			Tenant    string `json:"tenant"`
		}
		if json.Unmarshal(b[14:14+n], &h) == nil && h.SessionID == sid && h.Tenant == tenant {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// TestSessionSnapshots walks issue 28's acceptance on the real binary and
// real kernels: a snapshot names what it saved and skipped, a fork has the
// state and diverges, an idle reclaim and a restart restore it, a changed
// file is refused, another tenant cannot reach it, a deleted session comes
// back empty.
func TestSessionSnapshots(t *testing.T) {
	t.Parallel()
	priv, pub := tenantKey(t)
	stateDir := t.TempDir()
	env := []string{"AIO_JWT_PUBLIC_KEY=" + pub}
	args := []string{"--state-dir", stateDir, "--code-backend", "kernel", "--kernel-idle", "3"}
	d := startDaemonEnv(t, env, args...)
	alice := &caller{t: t, d: d, name: "alice", token: tenantJWT(t, priv, "alice")}
	bob := &caller{t: t, d: d, name: "bob", token: tenantJWT(t, priv, "bob")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	data := func(env map[string]any) map[string]any {
		m, _ := env["data"].(map[string]any)
		return m
	}
	exec := func(c *caller, sid, code string) map[string]any {
		t.Helper()
		st, env := c.call(ctx, http.MethodPost, "/v2/code/execute", map[string]any{"language": "python", "session_id": sid, "code": code, "timeout": 60})
		if st != 200 || data(env) == nil {
			t.Fatalf("%s: execute in %q: %d %v", c.name, sid, st, env)
		}
		return data(env)
	}

	if out := alice.run(ctx, "python", "lab", labSetup); out != "100000\n" {
		t.Fatalf("setup: %q", out)
	}
	want := exec(alice, "lab", labCheck)["stdout"]
	if want != "42 100000 2499975000 8 2 9 numpy False True\n" {
		t.Fatalf("check before any snapshot: %q", want)
	}

	// The snapshot names what it saved and what it skipped, and why.
	st, snap := alice.call(ctx, http.MethodPost, "/v2/code/sessions/lab/snapshot", map[string]any{})
	sd := data(snap)
	if st != 200 || sd == nil {
		t.Fatalf("snapshot: %d %v", st, snap)
	}
	saved := strings.Join(func() []string {
		var s []string
		for _, v := range sd["saved"].([]any) {
			s = append(s, v.(string))
		}
		return s
	}(), ",")
	skipped, _ := sd["skipped"].(map[string]any)
	reopened, _ := sd["reopened"].(map[string]any)
	if saved != "Counter,counter,df,double,fh,np,pd,square,total" || !strings.Contains(skipped["gen"].(string), "generator") ||
		len(skipped) != 1 || !strings.Contains(reopened["fh"].(string), "notes.txt") || sd["bytes"].(float64) < 1e6 {
		t.Fatalf("snapshot answer: %v", sd)
	}
	t.Logf("snapshot: %v bytes, saved %s, skipped %v, reopened %v", sd["bytes"], saved, skipped, reopened)

	// Bob cannot snapshot or fork alice's session: he has none of that name.
	if st, env := bob.call(ctx, http.MethodPost, "/v2/code/sessions/lab/snapshot", map[string]any{}); st != 404 {
		t.Fatalf("bob's snapshot of alice's session: %d %v", st, env)
	}
	if st, env := bob.call(ctx, http.MethodPost, "/v2/code/sessions/lab/fork", map[string]any{"session_id": "mine"}); st != 404 {
		t.Fatalf("bob's fork of alice's session: %d %v", st, env)
	}
	if st, env := alice.call(ctx, http.MethodPost, "/v2/code/sessions/lab/fork", map[string]any{"session_id": "bad id!"}); st != 422 ||
		!strings.Contains(env["message"].(string), "session_id") {
		t.Fatalf("fork into a bad id: %d %v", st, env)
	}

	// A fork has the state and diverges from the original.
	st, fork := alice.call(ctx, http.MethodPost, "/v2/code/sessions/lab/fork", map[string]any{"session_id": "lab2"})
	if fd := data(fork); st != 200 || fd == nil || fd["restored"] != true || fd["session_id"] != "lab2" {
		t.Fatalf("fork: %d %v", st, fork)
	}
	if out := exec(alice, "lab2", "total = -1\ndf = df.head(5)\n"+labCheck)["stdout"]; out != "-1 5 5 8 3 9 numpy False False\n" {
		t.Fatalf("the fork: %q", out)
	}
	// On a slow machine the original may have idled past --kernel-idle
	// while the fork ran; then this call restores it and the generator,
	// which a snapshot skips, is gone. The rest must be as it was.
	orig := exec(alice, "lab", labCheck)
	wantOrig := "42 100000 2499975000 8 3 9 numpy False True\n"
	skippedGen := func(ans map[string]any) bool {
		sk, _ := ans["skipped"].(map[string]any)
		g, _ := sk["gen"].(string)
		return strings.Contains(g, "generator")
	}
	genLost := orig["restored"] == true
	if genLost {
		wantOrig = "42 100000 2499975000 8 3 9 numpy False False\n"
		if !skippedGen(orig) {
			t.Fatalf("the original, restored after the fork, skipped: %v", orig)
		}
	}
	if orig["stdout"] != wantOrig {
		t.Fatalf("the original after the fork changed: %v", orig)
	}

	// Idle reclaim (--kernel-idle 3) saves it; the next call restores it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, list := alice.call(ctx, http.MethodGet, "/v2/code/sessions", nil)
		states := map[string]any{}
		for _, s := range data(list)["sessions"].([]any) {
			m := s.(map[string]any)
			states[m["session_id"].(string)] = m["state"]
		}
		if states["lab"] == "saved" && states["lab2"] == "saved" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions not saved after idle reclaim: %v", list)
		}
		time.Sleep(500 * time.Millisecond)
	}
	back := exec(alice, "lab", labCheck)
	if back["restored"] != true || back["fresh_runtime"] == true || back["stdout"] != "42 100000 2499975000 8 4 9 numpy False False\n" {
		t.Fatalf("after idle reclaim: %v", back)
	}
	// The generator is skipped by the first snapshot that meets it.
	if !genLost && !skippedGen(back) {
		t.Fatalf("after idle reclaim, skipped: %v", back)
	}
	if out := exec(alice, "lab", "fh.write('second\\n'); fh.flush(); print(repr(open('notes.txt').read()))"); out["stdout"] != "'first\\nsecond\\n'\n" {
		t.Fatalf("the reopened file: %v", out)
	}
	// Bob's "lab" is his own, empty.
	if out := exec(bob, "lab", "bobs = 1\nprint('df' in globals())"); out["stdout"] != "False\n" || out["restored"] == true {
		t.Fatalf("bob's lab: %v", out)
	}
	done := exec(alice, "lab", "total += 1\nprint('finished before the restart', total)")

	// After SIGTERM and a start on the same state directory the sessions
	// are listed as saved and restore; the finished execution is fetched.
	d = restart(t, d, env, args...)
	alice.d, bob.d = d, d
	_, list := alice.call(ctx, http.MethodGet, "/v2/code/sessions", nil)
	var names []string
	for _, s := range data(list)["sessions"].([]any) {
		m := s.(map[string]any)
		if m["state"] == "saved" {
			names = append(names, m["session_id"].(string))
		}
	}
	if strings.Join(names, ",") != "lab,lab2" {
		t.Fatalf("saved sessions after the restart: %v", list)
	}
	if _, list := bob.call(ctx, http.MethodGet, "/v2/code/sessions", nil); strings.Contains(mustJSON(t, list), "lab2") {
		t.Fatalf("bob sees alice's saved sessions: %v", list)
	}
	st, got := alice.call(ctx, http.MethodGet, "/v2/code/executions/"+done["execution_id"].(string), nil)
	if st != 200 || data(got)["stdout"] != "finished before the restart 43\n" || data(got)["state"] != "done" {
		t.Fatalf("an execution finished before the restart: %d %v", st, got)
	}
	if out := exec(alice, "lab", labCheck); out["restored"] != true || out["stdout"] != "43 100000 2499975000 8 5 9 numpy False False\n" {
		t.Fatalf("after the restart: %v", out)
	}

	// A snapshot file changed on disk is refused, never loaded.
	files := snapshotFiles(t, stateDir, "jwt:alice", "lab2")
	if len(files) == 0 {
		t.Fatal("no snapshot file of lab2")
	}
	last := files[len(files)-1]
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(b, []byte("total"))
	if i < 0 {
		i = len(b) - 100
	}
	b[i] ^= 0x20
	if err := os.WriteFile(last, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, changed := alice.call(ctx, http.MethodPost, "/v2/code/execute", map[string]any{"language": "python", "session_id": "lab2", "code": "print('df' in globals())"})
	if out := data(changed); st != 200 || out["restored"] == true || out["fresh_runtime"] != true || out["stdout"] != "False\n" ||
		!strings.Contains(changed["message"].(string), "does not verify") {
		t.Fatalf("a changed snapshot: %d %v", st, changed)
	}

	// A deleted session comes back empty, its snapshots gone.
	if st, env := alice.call(ctx, http.MethodDelete, "/v2/code/sessions/lab", nil); st != 200 {
		t.Fatalf("delete: %d %v", st, env)
	}
	if len(snapshotFiles(t, stateDir, "jwt:bob", "lab")) == 0 {
		t.Fatal("bob's lab was not saved at shutdown")
	}
	if n := len(snapshotFiles(t, stateDir, "jwt:alice", "lab")); n != 0 {
		t.Fatalf("%d snapshot files of a deleted session", n)
	}
	if out := exec(alice, "lab", "print('df' in globals())"); out["stdout"] != "False\n" || out["restored"] == true {
		t.Fatalf("a deleted session: %v", out)
	}
}

// A JavaScript session comes back after idle reclaim with what can be
// restored: plain data of its globals, its functions (from source), its
// working folder and environment; the answer names what was not.
func TestJavaScriptSessionRestores(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := startDaemon(t, "--native-idle", "2")
	c := &caller{t: t, d: d, name: "default"}
	setup := `var data = {a: [1, 2, 3], m: new Map([["k", 1]]), when: new Date(0)};
var counter = 5;
function add(a, b) { return a + b + counter; }
class Point { constructor(x) { this.x = x; } }
var p = new Point(-3);
const hidden = 1;
process.env.AIO_TEST_FLAG = "on";
process.chdir(require("os").tmpdir());
console.log("ready");`
	if out := c.run(ctx, "javascript", "js", setup); out != "ready\n" {
		t.Fatalf("setup: %q", out)
	}
	st, env := c.call(ctx, http.MethodPost, "/v2/code/sessions/js/snapshot", map[string]any{"language": "javascript"})
	sd, _ := env["data"].(map[string]any)
	if st != 200 || sd == nil || mustJSON(t, sd["saved"]) != `["add","counter","data"]` {
		t.Fatalf("snapshot: %d %v", st, env)
	}
	if sk := sd["skipped"].(map[string]any); !strings.Contains(sk["p"].(string), "Point") || sk["(let, const, class)"] == nil {
		t.Fatalf("skipped: %v", sk)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, list := c.call(ctx, http.MethodGet, "/v2/code/sessions", nil)
		if strings.Contains(mustJSON(t, list), `"state":"saved"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not saved after idle reclaim: %v", list)
		}
		time.Sleep(300 * time.Millisecond)
	}
	st, env = c.call(ctx, http.MethodPost, "/v2/code/execute", map[string]any{"language": "javascript", "session_id": "js",
		"code": `console.log(JSON.stringify(data.a), data.m.get("k"), data.when.getTime(), add(1, 2), process.env.AIO_TEST_FLAG, process.cwd() === require("os").tmpdir(), typeof p, typeof hidden)`})
	out, _ := env["data"].(map[string]any)
	if st != 200 || out["restored"] != true || out["stdout"] != "[1,2,3] 1 0 8 on true undefined undefined\n" {
		t.Fatalf("after idle reclaim: %d %v", st, env)
	}
}

// A bash session comes back after idle reclaim with its exported
// environment, its functions and its working folder; its other shell
// variables do not, and the answer says so.
func TestBashSessionRestores(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := startDaemon(t, "--native-idle", "2")
	c := &caller{t: t, d: d, name: "default"}
	if out := c.run(ctx, "bash", "sh1", `export GREETING="hi there"; greet() { echo "$GREETING $1"; }; mkdir -p snapdir && cd snapdir && LOCALVAR=1 && basename "$PWD"`); out != "snapdir\n" {
		t.Fatalf("setup: %q", out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, list := c.call(ctx, http.MethodGet, "/v2/code/sessions", nil)
		if strings.Contains(mustJSON(t, list), `"state":"saved"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not saved after idle reclaim: %v", list)
		}
		time.Sleep(300 * time.Millisecond)
	}
	st, env := c.call(ctx, http.MethodPost, "/v2/code/execute", map[string]any{"language": "bash", "session_id": "sh1",
		"code": `greet you; basename "$PWD"; echo "[$LOCALVAR]"`})
	out, _ := env["data"].(map[string]any)
	sk, _ := out["skipped"].(map[string]any)
	if st != 200 || out["restored"] != true || out["stdout"] != "hi there you\nsnapdir\n[]\n" || sk["(shell state)"] == nil {
		t.Fatalf("after idle reclaim: %d %v", st, env)
	}
}
