package backend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/aiod/aiod/stream/backend/isolate"
)

func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }

// TestMemoryLimitDeathIsOutOfMemory starts a forked kernel and a Node REPL
// under a 256 MiB cgroup limit: each keeps its extensions (completion, and
// Send for the kernel), an allocation past the limit kills it, and Err says
// so with Kind out_of_memory and the limit; closing removes its group.
func TestMemoryLimitDeathIsOutOfMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A total for all runtimes too, as the daemon has by default: the death
	// is still the runtime's own limit's.
	r, err := New(ctx, Config{CodeBackend: Kernel, Isolation: Isolation{MemoryBytes: 256 << 20, Pids: 256, TotalMemoryBytes: 8 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if m := r.Isolation("").Mechanism; m != isolate.CgroupV1 {
		t.Fatalf("mechanism %q (%s)", m, r.Isolation("").Fallback)
	}
	for _, c := range []struct {
		lang, code string
		sender     bool
	}{
		{Python, "x = bytearray(1 << 30)", true},
		{JS, "const a = []; for (;;) a.push(Buffer.alloc(16 << 20, 1))", false},
	} {
		t.Run(c.lang, func(t *testing.T) {
			b, err := r.For(Want{Language: c.lang})
			if err != nil {
				t.Fatal(err)
			}
			rt, err := b.Start(ctx, func(*jupyter.Message) {})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close(context.Background())
			if _, ok := rt.(jupyter.Completer); !ok {
				t.Error("the limited runtime lost jupyter.Completer")
			}
			if _, ok := rt.(jupyter.Sender); ok != c.sender {
				t.Errorf("jupyter.Sender: %v, want %v", ok, c.sender)
			}
			cg, _ := os.ReadFile(filepathProc(rt.Info().PID))
			if !strings.Contains(string(cg), "/aiod-") {
				t.Fatalf("runtime pid %d is not in an aiod cgroup:\n%s", rt.Info().PID, cg)
			}
			start := time.Now()
			de := killedBy(ctx, t, rt, c.code, "256 MiB (--runtime-memory-limit)", 30*time.Second)
			t.Logf("%s died of its memory limit %v after the execute: %v", c.lang, time.Since(start).Round(time.Millisecond), de)
			if err := rt.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if !errors.As(rt.Err(), &de) || de.Kind != jupyter.DeathOutOfMemory {
				t.Fatalf("after Close, Err = %v", rt.Err())
			}
			if ents := groups(t); len(ents) != 0 {
				t.Fatalf("groups left after Close: %v", ents)
			}
		})
	}
}

func filepathProc(pid int) string { return filepath.Join("/proc", strconv.Itoa(pid), "cgroup") }

// groups lists the runtime groups under this process's memory folder.
func groups(t *testing.T) []string {
	t.Helper()
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(own), "\n") {
		if p, ok := strings.CutPrefix(line, strings.SplitN(line, ":", 2)[0]+":memory:"); ok {
			dir := filepath.Join("/sys/fs/cgroup/memory", p, "aiod-"+strconv.Itoa(os.Getpid()))
			ents, _ := os.ReadDir(dir)
			var out []string
			for _, e := range ents {
				if e.IsDir() {
					out = append(out, e.Name())
				}
			}
			return out
		}
	}
	return nil
}

// TestChildOOMDoesNotMarkALaterDeath runs a child process that its
// kernel's memory limit kills (the kernel survives and says so in the
// child's exit status), then ends the kernel with os._exit: that death is
// not out_of_memory, although the group's OOM count went up earlier.
func TestChildOOMDoesNotMarkALaterDeath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, rec := startLimitedKernel(ctx, t, Isolation{MemoryBytes: 256 << 20, Pids: 256})
	id := jupyter.NewID()
	code := "import subprocess, sys\n" +
		"p = subprocess.run([sys.executable, '-c', 'x = bytearray(1 << 30)'])\n" +
		"print('child', p.returncode)"
	if err := rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		t.Fatal(err)
	}
	ms := rec.WaitFor(t, time.Minute, id, "the child's end", kerneltest.Complete)
	if s := kerneltest.Find(ms, jupyter.IOPub, jupyter.MsgStream); s == nil || !strings.Contains(kerneltest.Field(s, "text"), "child -9") {
		t.Fatalf("the child was not killed by the limit: %v", s)
	}
	// The kernel may die before Execute has returned; then Execute says so,
	// and Err below is what counts.
	if err := rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: "import os; os._exit(3)"}); err != nil && !strings.Contains(err.Error(), "died") {
		t.Fatal(err)
	}
	select {
	case <-rt.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the kernel did not exit")
	}
	var de *jupyter.DeadError
	if !errors.As(rt.Err(), &de) || de.Kind != "" || de.ExitCode != 3 {
		t.Fatalf("Err = %#v, want a plain death with exit code 3", rt.Err())
	}
}

// TestCPULimitThrottles runs a busy loop in a kernel limited to a fifth
// of a core: its group's CFS quota is what the flag says, and the
// scheduler throttled the loop (cpu.stat's nr_throttled), which is the
// limit working, whatever else the machine runs.
func TestCPULimitThrottles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, rec := startLimitedKernel(ctx, t, Isolation{MemoryBytes: 512 << 20, CPU: 0.2})
	dir := ""
	cg, _ := os.ReadFile(filepathProc(rt.Info().PID))
	for _, line := range strings.Split(string(cg), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && strings.Contains(","+f[1]+",", ",cpu,") {
			dir = filepath.Join("/sys/fs/cgroup/cpu", f[2])
		}
	}
	if !strings.Contains(dir, "/aiod-") {
		t.Fatalf("kernel pid %d is not in an aiod cpu group:\n%s", rt.Info().PID, cg)
	}
	quota, _ := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	period, _ := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if strings.TrimSpace(string(quota)) != "20000" || strings.TrimSpace(string(period)) != "100000" {
		t.Fatalf("quota %q per period %q, want 20000 per 100000", quota, period)
	}
	id := jupyter.NewID()
	code := "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass\nprint(time.process_time())"
	if err := rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		t.Fatal(err)
	}
	ms := rec.WaitFor(t, time.Minute, id, "the loop's end", kerneltest.Complete)
	stat, _ := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	throttled := 0
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "nr_throttled "); ok {
			throttled, _ = strconv.Atoi(v)
		}
	}
	out := ""
	if s := kerneltest.Find(ms, jupyter.IOPub, jupyter.MsgStream); s != nil {
		out = strings.TrimSpace(kerneltest.Field(s, "text"))
	}
	t.Logf("1.5 s of busy loop at 0.2 cores: %s s of CPU for the kernel process; cpu.stat:\n%s", out, stat)
	if throttled == 0 {
		t.Fatalf("a busy loop at 0.2 cores was never throttled: %s", stat)
	}
}

// startLimitedKernel starts a Python kernel under iso, recording its
// messages; it and its Runtimes are closed when the test ends.
func startLimitedKernel(ctx context.Context, t *testing.T, iso Isolation) (jupyter.Runtime, *kerneltest.Recorder) {
	t.Helper()
	kerneltest.SkipShort(t, "a kernel")
	r, err := New(ctx, Config{CodeBackend: Kernel, Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	b, err := r.For(Want{Language: Python})
	if err != nil {
		t.Fatal(err)
	}
	rec := kerneltest.NewRecorder()
	rt, err := b.Start(ctx, rec.Handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt, rec
}

// TestTotalMemoryLimitBoundsAllRuntimes gives runtimes no limit of their
// own but a total of 320 MiB: one kernel that takes 512 MiB is killed by
// the parent's limit, and its death says so, naming --runtimes-memory-total.
func TestTotalMemoryLimitBoundsAllRuntimes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, _ := startLimitedKernel(ctx, t, Isolation{TotalMemoryBytes: 320 << 20})
	killedBy(ctx, t, rt, "x = bytearray(512 << 20)", "320 MiB (--runtimes-memory-total)", 60*time.Second)
}

// killedBy runs code in rt and waits (at most wait) for the death by the
// memory limit it must cause, named limit.
func killedBy(ctx context.Context, t *testing.T, rt jupyter.Runtime, code, limit string, wait time.Duration) *jupyter.DeadError {
	t.Helper()
	if err := rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: code}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rt.Done():
	case <-time.After(wait):
		t.Fatalf("the runtime outlived its memory limit (%s) for %s", limit, wait)
	}
	var de *jupyter.DeadError
	if !errors.As(rt.Err(), &de) || de.Kind != jupyter.DeathOutOfMemory || de.Limit != limit {
		t.Fatalf("Err = %#v, want a DeadError of kind out_of_memory naming %s", rt.Err(), limit)
	}
	return de
}

// TestTotalPidsLimitBoundsAllRuntimes gives runtimes no process limit of
// their own but 96 together (--runtimes-pids-total): a kernel that starts
// threads until it cannot is stopped there, and answers.
func TestTotalPidsLimitBoundsAllRuntimes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, rec := startLimitedKernel(ctx, t, Isolation{TotalPids: 96})
	id := jupyter.NewID()
	code := "import threading\nev = threading.Event()\nn, err = 0, None\ntry:\n    for i in range(500):\n" +
		"        threading.Thread(target=ev.wait, daemon=True).start(); n += 1\nexcept RuntimeError as e:\n    err = str(e)\nev.set()\nprint(n, err)"
	if err := rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		t.Fatal(err)
	}
	ms := rec.WaitFor(t, time.Minute, id, "the thread count", kerneltest.Complete)
	out := strings.TrimSpace(kerneltest.StreamText(ms, "stdout"))
	n, _ := strconv.Atoi(strings.Fields(out + " x")[0])
	if n == 0 || n >= 96 || !strings.Contains(out, "can't start new thread") {
		t.Fatalf("threads started under a total of 96: %q", out)
	}
}

// TestStartupCodeRunsUnderLimits plays a hostile tenant that plants code
// which runs before its runtime's first execution: an IPython startup file
// in its home (a forked kernel reads it) and a NODE_OPTIONS preload. Each
// must already run in the runtime's own cgroups (pids and memory), and the
// process it starts in a session of its own must end with the runtime.
func TestStartupCodeRunsUnderLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, _ := newTenantRuntimes(t, ctx, Config{CodeBackend: Kernel, Isolation: Isolation{MemoryBytes: 1 << 30, Pids: 256}})
	const tenant = "jwt:mallory"
	home := strings.TrimSpace(runIn(t, ctx, r, Want{Language: Python, Tenant: tenant}, kerneltest.PlantStartupCode))
	if !strings.HasPrefix(home, "/") {
		t.Fatalf("planting answered %q", home)
	}
	for _, w := range []Want{
		{Language: Python, Tenant: tenant},
		{Language: JS, Tenant: tenant, Env: []string{"NODE_OPTIONS=--require " + home + "/plant.js"}},
	} {
		t.Run(w.Language, func(t *testing.T) {
			out := runIn(t, ctx, r, w, kerneltest.ReadPlanted(w.Language, home)) // the runtime is closed when it returns
			cg, strayPID, ok := strings.Cut(strings.TrimSpace(out), "@")
			if !ok {
				t.Fatalf("the planted code left %q", out)
			}
			if out := kerneltest.OutsideGroups(cg, "/aiod-"+strconv.Itoa(os.Getpid())+"/"); len(out) > 0 {
				t.Errorf("the planted code ran outside the runtime's %v cgroups:\n%s", out, cg)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(strayPID))
			if err != nil {
				t.Fatalf("stray pid %q", strayPID)
			}
			if !kerneltest.Ends(pid, 10*time.Second) {
				t.Fatalf("the planted code's process in a session of its own (pid %d) outlived its runtime by 10 s", pid)
			}
		})
	}
}
