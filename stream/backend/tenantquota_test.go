package backend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// startFor starts a runtime of w on r and returns it with its recorder;
// the runtime is closed at the test's end.
func startFor(ctx context.Context, t *testing.T, r *Runtimes, w Want) (jupyter.Runtime, *kerneltest.Recorder) {
	t.Helper()
	b, err := r.For(w)
	if err != nil {
		t.Fatal(err)
	}
	rec := kerneltest.NewRecorder()
	rt, err := b.Start(ctx, rec.Handle)
	if err != nil {
		t.Fatalf("start %+v: %v", w, err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt, rec
}

// run executes code in rt and returns its stdout once it completes.
func run(ctx context.Context, t *testing.T, rt jupyter.Runtime, rec *kerneltest.Recorder, code string) string {
	t.Helper()
	id := jupyter.NewID()
	if err := rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(kerneltest.StreamText(rec.WaitFor(t, time.Minute, id, "the output", kerneltest.Complete), "stdout"))
}

// pidsGroup is the pids cgroup of process pid, as the host's pids
// hierarchy names it.
func pidsGroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(filepathProc(pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && (f[1] == "pids" || f[0] == "0") {
			return f[2]
		}
	}
	t.Fatalf("no pids cgroup in %s", b)
	return ""
}

// threadsOf is how many threads process pid runs.
func threadsOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatalf("no Threads line in %s", b)
	return 0
}

// threads is code that starts up to n threads that wait, keeps them, and
// prints how many it started and why it stopped.
func threads(n int) string {
	return "import threading\nev = threading.Event()\nn, err = 0, None\ntry:\n    for i in range(" + strconv.Itoa(n) + "):\n" +
		"        threading.Thread(target=ev.wait, daemon=True).start(); n += 1\nexcept RuntimeError as e:\n    err = str(e)\nprint(n, err)"
}

// TestTenantQuotasBoundAllItsRuntimes plays a tenant that spreads itself
// over two kernels to take more than its share: its runtimes sit in one
// group of their own (a level between the runtimes' parent and theirs, so
// that the CPU is shared among tenants before runtimes), which holds the
// tenant's quotas. Alice's second kernel cannot start the threads her
// first one holds past --tenant-pids-limit while bob's kernel starts as
// many; memory past --tenant-memory-limit over her two kernels kills one,
// whose death names that flag, and bob's kernel takes as much untouched.
// Alice's group goes with her last runtime.
func TestTenantQuotasBoundAllItsRuntimes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	quotaPids := 120 + 4*runtime.NumCPU()
	r, _ := newTenantRuntimes(t, ctx, Config{CodeBackend: Kernel, Isolation: Isolation{TenantPids: int64(quotaPids), TenantMemoryBytes: 400 << 20}})
	if m := r.iso.Mechanism(); m != "cgroup-v1" && m != "cgroup-v2" {
		t.Fatalf("limits by %s: this machine has cgroups", m)
	}
	a1, rec1 := startFor(ctx, t, r, Want{Language: Python, Tenant: "jwt:alice"})
	a2, rec2 := startFor(ctx, t, r, Want{Language: Python, Tenant: "jwt:alice"})
	b1, recB := startFor(ctx, t, r, Want{Language: Python, Tenant: "jwt:bob"})

	g1, g2, gb := pidsGroup(t, a1.Info().PID), pidsGroup(t, a2.Info().PID), pidsGroup(t, b1.Info().PID)
	ta, tb := filepath.Dir(g1), filepath.Dir(gb)
	if filepath.Dir(g2) != ta || ta == tb || !strings.HasPrefix(filepath.Base(ta), "tenant-") || !strings.HasPrefix(filepath.Base(tb), "tenant-") {
		t.Fatalf("groups: alice %s and %s, bob %s; want alice's two in one tenant group, bob's in another", g1, g2, gb)
	}
	if r.iso.TenantGroups() != 2 {
		t.Errorf("%d tenant groups, want 2", r.iso.TenantGroups())
	}

	// Processes: n threads in alice's first kernel leave her second one
	// fewer than n under her quota; bob starts his n. n is what is left
	// of the quota after her kernels' own threads (a few on two cores;
	// numerical libraries start one per core), less some slack.
	n := quotaPids - threadsOf(t, a1.Info().PID) - threadsOf(t, a2.Info().PID) - 5
	if n < 20 {
		t.Fatalf("alice's kernels start with %d of her %d processes already", quotaPids-n-5, quotaPids)
	}
	want := strconv.Itoa(n) + " "
	if out := run(ctx, t, a1, rec1, threads(n)); !strings.HasPrefix(out, want) {
		t.Fatalf("alice's first kernel: %q, want %d threads", out, n)
	}
	out := run(ctx, t, a2, rec2, threads(n))
	t.Logf("quota %d processes, %d threads each: alice's second kernel printed %q", quotaPids, n, out)
	if got, _ := strconv.Atoi(strings.Fields(out + " x")[0]); got >= n || !strings.Contains(out, "can't start new thread") {
		t.Errorf("alice's second kernel started %q threads, want fewer than %d under her quota of %d processes", out, n, quotaPids)
	}
	if out := run(ctx, t, b1, recB, threads(n)); !strings.HasPrefix(out, want) {
		t.Errorf("bob's kernel beside alice's: %q, want %d threads", out, n)
	}

	// Memory: 250 MiB in each of alice's kernels cannot both fit in 400.
	if out := run(ctx, t, a1, rec1, "x = bytearray(250 << 20); x[::4096] = b'x' * len(x[::4096]); print('held')"); out != "held" {
		t.Fatalf("alice's first 250 MiB: %q", out)
	}
	if err := a2.Execute(ctx, jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: "y = bytearray(250 << 20); y[::4096] = b'y' * len(y[::4096])"}); err != nil {
		t.Fatal(err)
	}
	var dead jupyter.Runtime
	select {
	case <-a1.Done():
		dead = a1
	case <-a2.Done():
		dead = a2
	case <-time.After(time.Minute):
		t.Fatal("alice's kernels hold 500 MiB under a quota of 400 MiB")
	}
	var de *jupyter.DeadError
	if want := "400 MiB (--tenant-memory-limit)"; !errors.As(dead.Err(), &de) || de.Kind != jupyter.DeathOutOfMemory || de.Limit != want {
		t.Errorf("Err = %#v, want a DeadError of kind out_of_memory naming %s", dead.Err(), want)
	}
	if out := run(ctx, t, b1, recB, "z = bytearray(250 << 20); z[::4096] = b'z' * len(z[::4096]); print('held')"); out != "held" {
		t.Errorf("bob's 250 MiB beside alice's: %q", out)
	}

	for _, rt := range []jupyter.Runtime{a1, a2} {
		if err := rt.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(pidsRoot(t), ta)); !os.IsNotExist(err) {
		t.Errorf("alice's tenant group %s after her last runtime: %v, want it gone", ta, err)
	}
	if r.iso.TenantGroups() != 1 {
		t.Errorf("%d tenant groups after alice's runtimes closed, want bob's only", r.iso.TenantGroups())
	}
}

// pidsRoot is where the pids hierarchy is mounted (cgroup v1), or the
// unified one.
func pidsRoot(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
			return p
		}
	}
	t.Fatal("no pids cgroup hierarchy")
	return ""
}
