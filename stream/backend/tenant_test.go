package backend

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/backend/isolate"
)

// newTenantRuntimes starts Runtimes under tenant isolation with a state
// directory and a working folder of the test's own.
func newTenantRuntimes(t testing.TB, ctx context.Context, cfg Config) (*Runtimes, string) {
	t.Helper()
	kerneltest.SkipShort(t, "tenant runtimes")
	base := t.TempDir()
	work := filepath.Join(base, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.Workdir = work
	cfg.Isolation.Isolation = isolate.ModeTenant
	cfg.Isolation.StateDir = filepath.Join(base, "state")
	cfg.Isolation.Workdir = work
	cfg.Isolation.FirstUID, cfg.Isolation.LastUID = kerneltest.UIDRange(t)
	r, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r, work
}

// runIn starts a runtime of w and runs code in it, returning its stdout.
func runIn(t testing.TB, ctx context.Context, r *Runtimes, w Want, code string) string {
	t.Helper()
	b, err := r.For(w)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out strings.Builder
	done := make(chan struct{})
	id := jupyter.NewID()
	rt, err := b.Start(ctx, func(m *jupyter.Message) {
		if m.Parent.MsgID != id {
			return
		}
		switch m.Header.MsgType {
		case jupyter.MsgStream:
			var c jupyter.StreamContent
			_ = json.Unmarshal(m.Content, &c)
			mu.Lock()
			out.WriteString(c.Text)
			mu.Unlock()
		case jupyter.MsgError:
			mu.Lock()
			out.WriteString("ERROR " + string(m.Content))
			mu.Unlock()
		case jupyter.MsgStatus:
			var c jupyter.StatusContent
			_ = json.Unmarshal(m.Content, &c)
			if c.ExecutionState == jupyter.StateIdle {
				close(done)
			}
		}
	})
	if err != nil {
		t.Fatalf("start %+v: %v", w, err)
	}
	defer rt.Close(context.Background())
	if err := rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("no answer")
	}
	mu.Lock()
	defer mu.Unlock()
	return out.String()
}

// templateReady starts the Python kernel template of r and waits until
// it is ready, until ctx ends.
func templateReady(t testing.TB, ctx context.Context, r *Runtimes) {
	t.Helper()
	err := r.pools.templates.AwaitFirst(ctx, r.env.PythonKernel.spec)
	if ts := r.KernelStart().Templates; err != nil || len(ts) == 0 || ts[0].State != "ready" {
		t.Fatalf("the kernel template is not ready (%v): %+v", err, ts)
	}
}

const pyProbe = `import json, os, errno
r = {"uid": os.getuid(), "home": os.path.expanduser("~"), "cwd": os.getcwd()}
def t(n, f):
    try:
        f(); r[n] = "ok"
    except OSError as e:
        r[n] = errno.errorcode.get(e.errno)
t("tmp", lambda: open("/tmp/from-" + str(os.getpid()), "w").write("x"))
t("etc", lambda: open("/etc/nope", "w").write("x"))
t("kill1", lambda: os.kill(1, 0))
r["procs"] = len([p for p in os.listdir("/proc") if p.isdigit()])
r["status"] = {k: v.strip() for k, _, v in (l.partition(":") for l in open("/proc/self/status")) if k in ("NoNewPrivs", "Seccomp", "CapEff")}
print(json.dumps(r))`

const jsProbe = `const fs = require('fs'); const r = {uid: process.getuid(), home: require('os').homedir(), cwd: process.cwd()};
try { fs.writeFileSync('/tmp/from-node', 'x'); r.tmp = 'ok' } catch (e) { r.tmp = e.code }
try { fs.writeFileSync('/etc/nope', 'x'); r.etc = 'ok' } catch (e) { r.etc = e.code }
r.procs = fs.readdirSync('/proc').filter(p => /^\d+$/.test(p)).length;
console.log(JSON.stringify(r))`

// TestTenantRuntimesAreConfined starts every kind of local runtime for a
// tenant (a forked kernel, a spawned one, a native Python and a Node.js
// REPL) and checks each runs as the tenant's uid in its view.
func TestTenantRuntimesAreConfined(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, mode := range []string{"fork", "spawn"} {
		t.Run(mode, func(t *testing.T) {
			r, work := newTenantRuntimes(t, ctx, Config{CodeBackend: Kernel, KernelStart: mode})
			if mode == "fork" {
				// A start waits for a template's first readiness only so
				// long before it spawns; a loaded machine can take longer.
				templateReady(t, ctx, r)
			}
			alice, err := r.iso.Tenant("jwt:alice")
			if err != nil {
				t.Fatal(err)
			}
			cases := []struct {
				name string
				w    Want
				code string
			}{
				{"kernel", Want{Language: Python, Tenant: "jwt:alice"}, pyProbe},
				{"node", Want{Language: JS, Tenant: "jwt:alice"}, jsProbe},
			}
			if mode == "spawn" {
				cases = append(cases, struct {
					name string
					w    Want
					code string
				}{"native-python", Want{Language: Python, Tenant: "jwt:alice"}, pyProbe})
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					rr := r
					if c.name == "native-python" {
						rr, _ = newTenantRuntimes(t, ctx, Config{CodeBackend: Native})
					}
					out := runIn(t, ctx, rr, c.w, c.code)
					var got struct {
						UID            uint32
						Home, Cwd, Tmp string
						Etc            string
						Procs          int
						Status         map[string]string
						Kill1          string
					}
					if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
						t.Fatalf("output %q: %v", out, err)
					}
					t.Logf("%s: %s", c.name, out)
					tenant := alice
					if rr != r {
						tenant, _ = rr.iso.Tenant("jwt:alice")
					}
					if got.UID != tenant.UID || got.Home != "/home/user" || got.Tmp != "ok" || got.Etc != "EROFS" {
						t.Errorf("got %+v; want uid %d, HOME /home/user, /tmp writable, /etc read-only", got, tenant.UID)
					}
					if rr == r && got.Cwd != work {
						t.Errorf("cwd %q, want %q", got.Cwd, work)
					}
					if got.Procs > 3 {
						t.Errorf("/proc shows %d processes", got.Procs)
					}
					if got.Status != nil && (got.Status["NoNewPrivs"] != "1" || got.Status["Seccomp"] != "2" || got.Status["CapEff"] != "0000000000000000") {
						t.Errorf("status %v", got.Status)
					}
				})
			}
			if mode == "fork" {
				ks := r.KernelStart()
				if len(ks.Templates) != 1 || ks.Templates[0].Starts != 1 || ks.Templates[0].Fallbacks != 0 {
					t.Errorf("the kernel was not forked from its template: %+v", ks.Templates)
				}
			}
		})
	}
}

// TestTenantPoolsAreConfined: with --kernel-prewarm, each tenant gets a
// pool of its own, filled in its sandbox; a kernel taken from alice's pool
// runs as alice, and bob's first kernel is cold (he has no pool yet).
func TestTenantPoolsAreConfined(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, _ := newTenantRuntimes(t, ctx, Config{CodeBackend: Kernel, KernelPrewarm: 1})
	alice, err := r.iso.Tenant("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.For(Want{Language: Python, Tenant: "jwt:alice"}); err != nil { // makes alice's pool
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for r.PoolStats("jwt:alice")["kernel"].Ready < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("alice's pool never filled: %+v", r.PoolStats("jwt:alice"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := runIn(t, ctx, r, Want{Language: Python, Tenant: "jwt:alice"}, "import os; print(os.getuid(), os.getcwd())")
	if want := fmt.Sprintf("%d %s\n", alice.UID, r.Workdir()); out != want {
		t.Errorf("pooled kernel: %q, want %q", out, want)
	}
	if st := r.PoolStats("jwt:alice")["kernel"]; st.Taken != 1 {
		t.Errorf("alice's pool: %+v, want one taken", st)
	}
	if st := r.PoolStats("jwt:bob")["kernel"]; st.Ready != 0 || st.Taken != 0 {
		t.Errorf("bob's pool before his first call: %+v", st)
	}
}
