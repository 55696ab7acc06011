package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
)

func TestExecute(t *testing.T) {
	t.Parallel()
	k, rec := startKernel(t, nil)
	id := execute(t, k, `print("hi")`)
	ms := rec.WaitFor(t, execTimeout, id, "execute_reply and idle", kerneltest.Complete)

	want := []struct{ channel, typ string }{
		{"iopub", "status"}, {"iopub", "execute_input"}, {"iopub", "stream"}, {"shell", "execute_reply"},
	}
	for _, w := range want {
		if kerneltest.Find(ms, w.channel, w.typ) == nil {
			t.Errorf("no %s %s in %s", w.channel, w.typ, kerneltest.Summary(ms))
		}
	}
	if kerneltest.FindStatus(ms, "busy") == nil {
		t.Errorf("no busy status in %s", kerneltest.Summary(ms))
	}
	if got := kerneltest.StreamText(ms, "stdout"); got != "hi\n" {
		t.Errorf("stdout = %q, want %q", got, "hi\n")
	}
	if got := kerneltest.Field(kerneltest.Find(ms, "iopub", "execute_input"), "code"); got != `print("hi")` {
		t.Errorf("execute_input code = %q", got)
	}
	if st := kerneltest.Field(kerneltest.Find(ms, "shell", "execute_reply"), "status"); st != "ok" {
		t.Errorf("execute_reply status = %q", st)
	}
	for _, m := range ms {
		if m.Header.Session == "" || m.Parent.Session != k.Session() {
			t.Errorf("%s: header session %q, parent session %q", m.Header.MsgType, m.Header.Session, m.Parent.Session)
		}
	}

	info := k.Info()
	if info.Backend != "kernel" || info.Language != "python" || info.Name != "python3" ||
		info.PID <= 0 || !strings.HasPrefix(info.Version, "3.") {
		t.Errorf("info = %+v", info)
	}
	var ki jupyter.KernelInfoReply
	if err := json.Unmarshal(k.KernelInfo(), &ki); err != nil || ki.Implementation != "ipython" {
		t.Errorf("kernel info %s: %v", k.KernelInfo(), err)
	}
	// Pongs count heartbeats, which a slow run has time for.
	if s := k.Stats(); s.BadSignature != 0 || s.Malformed != 0 {
		t.Errorf("stats = %+v", s)
	}
}

func TestExecuteError(t *testing.T) {
	t.Parallel()
	k, rec := startKernel(t, nil)
	ms := run(t, k, rec, "1/0")
	e := kerneltest.Find(ms, "iopub", "error")
	if e == nil || kerneltest.Field(e, "ename") != "ZeroDivisionError" {
		t.Fatalf("no ZeroDivisionError in %s", kerneltest.Summary(ms))
	}
	if st := kerneltest.Field(kerneltest.Find(ms, "shell", "execute_reply"), "status"); st != "error" {
		t.Errorf("execute_reply status = %q, want error", st)
	}
}

func TestExecuteDisplayData(t *testing.T) {
	t.Parallel()
	k, rec := startKernel(t, nil)
	ms := run(t, k, rec, "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
	d := kerneltest.Find(ms, "iopub", "display_data")
	if d == nil {
		t.Fatalf("no display_data in %s", kerneltest.Summary(ms))
	}
	var c struct {
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(d.Content, &c); err != nil {
		t.Fatal(err)
	}
	if png, _ := c.Data["image/png"].(string); len(png) < 100 {
		t.Errorf("display_data has no image/png: keys %v", keys(c.Data))
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestInterruptSignal(t *testing.T) {
	t.Parallel()
	k, rec := startKernel(t, nil)
	testInterrupt(t, k, rec)
}

func TestInterruptMessage(t *testing.T) {
	t.Parallel()
	k, rec := startKernel(t, func(o *Options) {
		s := *o.Spec
		s.InterruptMode = InterruptMessage
		o.Spec = &s
	})
	testInterrupt(t, k, rec)
}

// testInterrupt interrupts an endless loop and checks the kernel kept its
// state. The interrupt is repeated only if the loop still runs seconds
// later: one landing while the kernel handles the previous could break its
// reply.
func testInterrupt(t *testing.T, k *Kernel, rec *recorder) {
	run(t, k, rec, "x = 42")
	// An interrupt landing in IPython's own code around the cell (even
	// after execute_input) makes ipykernel publish idle without any
	// execute_reply; wait until the user's code runs. The code says so by
	// a file, not by printing: an interrupt that lands while ipykernel
	// still flushes a print was seen to surface as a RuntimeError.
	mark := filepath.Join(t.TempDir(), "looping")
	id := execute(t, k, fmt.Sprintf("open(%q, 'w').close()\nwhile True: pass", mark))
	for wait := time.Now().Add(execTimeout); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("the loop did not start within %s: %s", execTimeout, kerneltest.Summary(rec.Children(id)))
		}
	}
	deadline := time.Now().Add(execTimeout)
	for !kerneltest.Complete(rec.Children(id)) {
		if time.Now().After(deadline) {
			t.Fatalf("loop still running: %s", kerneltest.Summary(rec.Children(id)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := k.Interrupt(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		for wait := time.Now().Add(5 * time.Second); time.Now().Before(wait) && !kerneltest.Complete(rec.Children(id)); {
			time.Sleep(50 * time.Millisecond)
		}
	}
	ms := rec.Children(id)
	// Under load the interrupt can land inside ipykernel's own output code,
	// which then prints the KeyboardInterrupt to stderr instead of sending
	// an error message; either way the loop must have been stopped by it.
	e := kerneltest.Find(ms, "iopub", "error")
	if (e == nil || kerneltest.Field(e, "ename") != "KeyboardInterrupt") && !strings.Contains(kerneltest.StreamText(ms, "stderr"), "KeyboardInterrupt") {
		t.Fatalf("no KeyboardInterrupt in %s (stderr %q)", kerneltest.Summary(ms), kerneltest.StreamText(ms, "stderr"))
	}
	if got := stdout(run(t, k, rec, "print(x)")); got != "42\n" {
		t.Errorf("after interrupt, x printed %q, want 42", got)
	}
}

func TestKilledKernelIsDetected(t *testing.T) {
	// Not parallel: the shutdown grace is made a minute (below), so that a
	// Close that waited for it cannot pass for a loaded machine's delay.
	defer func(g time.Duration) { shutdownGrace = g }(shutdownGrace)
	shutdownGrace = time.Minute
	k, _ := startKernel(t, nil)
	// AfterDone's callback runs once Done is closed, not before; one
	// stopped before the end never runs.
	called := make(chan bool, 1)
	k.AfterDone(func() {
		select {
		case <-k.Done():
			called <- true
		default:
			called <- false
		}
	})
	stopped := k.AfterDone(func() { t.Error("a stopped AfterDone ran") })
	if !stopped() {
		t.Fatal("AfterDone's stop before the end: false")
	}
	pid := k.Info().PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after SIGKILL")
	}
	select {
	case afterDone := <-called:
		if !afterDone {
			t.Fatal("AfterDone's callback ran before Done was closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AfterDone's callback not called 10s after Done")
	}
	var dead *jupyter.DeadError
	if err := k.Err(); !errors.As(err, &dead) || dead.Signal != "SIGKILL" ||
		err.Error() != "kernel died: killed by signal SIGKILL" {
		t.Fatalf("Err = %v (%#v)", err, err)
	}
	if err := k.Execute(context.Background(), jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: "1"}); !errors.As(err, &dead) {
		t.Errorf("Execute after death: %v", err)
	}
	if err := k.Interrupt(context.Background()); !errors.As(err, &dead) {
		t.Errorf("Interrupt after death: %v", err)
	}
	start := time.Now()
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A Close that waited for the dead kernel's shutdown reply would take
	// the whole grace.
	if d := time.Since(start); d >= shutdownGrace/2 {
		t.Errorf("Close after death took %s, half the shutdown grace or more", d)
	}
	if !errors.As(k.Err(), &dead) {
		t.Errorf("after Close, Err = %v, want the jupyter.DeadError", k.Err())
	}
	assertGone(t, k)
}

func TestHeartbeatLoss(t *testing.T) {
	k, _ := startKernel(t, func(o *Options) {
		o.HeartbeatInterval = 100 * time.Millisecond
		o.HeartbeatTimeout = 2 * time.Second
	})
	// A stopped process answers nothing but stays alive.
	if err := syscall.Kill(k.Info().PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("Done not closed 15s after the kernel stopped answering")
	}
	// The silence it names is the timeout, or more when aiod's own
	// heartbeat ran late on a loaded machine and the kernel was given
	// longer as a starved one (the loader loop met 6.6s).
	var dead *jupyter.DeadError
	err := k.Err()
	secs, ok := strings.CutPrefix(err.Error(), "kernel died: stopped answering heartbeats for ")
	silent, perr := time.ParseDuration(secs)
	if !errors.As(err, &dead) || !ok || perr != nil || silent < 2*time.Second {
		t.Fatalf("Err = %v, want a death after at least 2s of silence", err)
	}
	assertGone(t, k)
}

// TestIdleKernelIsNotPinged: pings come every HeartbeatInterval while the
// kernel is used, none once it has been idle for IdleAfter, and they
// resume when it is used again.
func TestIdleKernelIsNotPinged(t *testing.T) {
	k, rec := startKernel(t, func(o *Options) {
		o.HeartbeatInterval = 20 * time.Millisecond
		o.IdleAfter = 300 * time.Millisecond
	})
	waitUntil(t, "the heartbeat to sleep", func() bool { return k.hbIdle.Load() })
	// Pongs before the heartbeat slept are not asserted: on a loaded
	// machine the first may take longer than IdleAfter (300 ms) to come
	// (the loader loop met it). The pings during the execution below show
	// that the heartbeat works.
	idle := k.Stats().Pongs
	time.Sleep(time.Second) // time for pings that must not come
	if n := k.Stats().Pongs - idle; n > 1 {
		t.Errorf("%d pongs in a second of idleness, want at most the one already on its way", n)
	}
	id := execute(t, k, "import time; print('sleeping', flush=True); time.sleep(60)")
	waitUntil(t, "the pings back during an execution", func() bool { return k.Stats().Pongs-idle >= 5 })
	// The interrupt goes to the cell once it runs: a SIGINT that lands in
	// ipykernel's own handling before the cell (a loaded machine) loses
	// the execute_reply, which is ipykernel's, not what this tests.
	rec.WaitFor(t, execTimeout, id, "the cell's first output", func(ms []*jupyter.Message) bool { return kerneltest.Find(ms, "iopub", "stream") != nil })
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, execTimeout, id, "execute_reply and idle", kerneltest.Complete)
}

// waitUntil polls cond until it holds, failing the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// TestStoppedWhileIdle: a kernel stopped while idle (no pings) is found
// dead once it is used again.
func TestStoppedWhileIdle(t *testing.T) {
	k, _ := startKernel(t, func(o *Options) {
		o.HeartbeatInterval = 50 * time.Millisecond
		o.HeartbeatTimeout = time.Second
		o.IdleAfter = 200 * time.Millisecond
	})
	waitUntil(t, "the heartbeat to sleep", func() bool { return k.hbIdle.Load() })
	if err := syscall.Kill(k.Info().PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Done():
		t.Fatal("an idle stopped kernel was declared dead before anyone used it")
	case <-time.After(1500 * time.Millisecond): // time for a wrong verdict: more than the heartbeat timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = k.Execute(ctx, jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: "1"})
	select {
	case <-k.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("Done not closed 15s after a stopped kernel was used")
	}
	var dead *jupyter.DeadError
	if err := k.Err(); !errors.As(err, &dead) || !strings.Contains(err.Error(), "stopped answering heartbeats") {
		t.Fatalf("Err = %v", err)
	}
	assertGone(t, k)
}

func TestClose(t *testing.T) {
	t.Parallel()
	k, rec := startKernel(t, nil)
	run(t, k, rec, "import subprocess; p = subprocess.Popen(['sleep', '600'])")
	pid, dir := k.Info().PID, k.connDir
	start := time.Now()
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %s", time.Since(start))
	if err := k.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case <-k.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if !errors.Is(k.Err(), ErrClosed) {
		t.Errorf("Err = %v, want ErrClosed", k.Err())
	}
	if err := k.Execute(context.Background(), jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: "1"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Execute after Close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("connection folder %s still there: %v", dir, err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kernel process %d still there: %v", pid, err)
	}
	assertGone(t, k)
}

// TestCloseStuckAfterItsReply: a kernel that answered shutdown_request
// and then hangs in its teardown (as ipykernel 6.17 sometimes does, in a
// deadlock between its threads; here an atexit handler that sleeps) is
// signalled replyGrace after its reply, not after the whole shutdownGrace,
// which the test makes a minute so that the two cannot be mistaken.
func TestCloseStuckAfterItsReply(t *testing.T) {
	defer func(g time.Duration) { shutdownGrace = g }(shutdownGrace)
	shutdownGrace = time.Minute
	k, rec := startKernel(t, nil)
	run(t, k, rec, "import atexit, time\natexit.register(time.sleep, 600)")
	pid := k.Info().PID
	start := time.Now()
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > shutdownGrace/2 {
		t.Fatalf("Close of a kernel stuck after its shutdown_reply took %s: it waited for shutdownGrace, not replyGrace", d)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kernel process %d still there: %v", pid, err)
	}
}

func TestCloseConcurrent(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, nil)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := k.Close(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	assertGone(t, k)
}

func TestTwoKernels(t *testing.T) {
	t.Parallel()
	kerneltest.SkipShort(t, "kernels")
	var (
		ks   [2]*Kernel
		recs [2]*recorder
		wg   sync.WaitGroup
	)
	for i := range ks {
		wg.Go(func() {
			var err error
			if ks[i], recs[i], err = tryStartKernel(t, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if ks[0].Info().PID == ks[1].Info().PID {
		t.Fatal("both kernels have the same process")
	}
	run(t, ks[0], recs[0], "a = 'first'")
	run(t, ks[1], recs[1], "a = 'second'")
	for i, want := range []string{"first\n", "second\n"} {
		if got := stdout(run(t, ks[i], recs[i], "print(a)")); got != want {
			t.Errorf("kernel %d printed %q, want %q", i, got, want)
		}
	}
	if err := ks[0].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := stdout(run(t, ks[1], recs[1], "print(a)")); got != "second\n" {
		t.Errorf("after closing the first, the second printed %q", got)
	}
}

func TestStartFailure(t *testing.T) {
	t.Parallel()
	spec := &Spec{Name: "broken", Argv: []string{"/usr/bin/python3", "-c", "import sys; sys.exit('no kernel here')"},
		InterruptMode: InterruptSignal}
	_, err := Start(context.Background(), Options{Spec: spec, StartTimeout: startTimeout})
	if err == nil || !strings.Contains(err.Error(), "start kernel broken: kernel died: exited with code 1: no kernel here") {
		t.Fatalf("err = %v", err)
	}

	spec = &Spec{Name: "mute", Argv: []string{"sleep", "600"}, InterruptMode: InterruptSignal}
	start := time.Now()
	_, err = Start(context.Background(), Options{Spec: spec, StartTimeout: time.Second})
	if err == nil || err.Error() != "start kernel mute: not ready within 1s" {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 60*time.Second { // far less than the mute kernel's 600 s
		t.Errorf("failed start took %s", d)
	}
}

// assertGone checks that the kernel's process and connection file are gone.
func assertGone(t *testing.T, k *Kernel) {
	t.Helper()
	// Killed members of the group may take a moment to be reaped.
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = syscall.Kill(-k.pid, 0); errors.Is(err, syscall.ESRCH) {
			break
		}
	}
	if !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process group %d still there: %v", k.pid, err)
	}
	if _, err := os.Stat(k.connDir); !os.IsNotExist(err) {
		t.Errorf("connection folder %s still there", k.connDir)
	}
}

func TestEnvAndCwd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, rec := startKernel(t, func(o *Options) {
		s := *o.Spec
		s.Env = map[string]string{"AIOD_SPEC_VAR": "from spec", "AIOD_BOTH": "spec"}
		o.Spec = &s
		o.Env = []string{"AIOD_OPT_VAR=from options", "AIOD_BOTH=options"}
		o.Cwd = dir
	})
	got := stdout(run(t, k, rec, "import os\n"+
		"print(os.environ['AIOD_SPEC_VAR'], os.environ['AIOD_OPT_VAR'], os.environ['AIOD_BOTH'], sep='|')\n"+
		"print(os.getcwd())"))
	want := "from spec|from options|options\n" + dir + "\n"
	if got != want {
		t.Errorf("kernel printed %q, want %q", got, want)
	}
}

func TestSendPassThrough(t *testing.T) {
	t.Parallel()
	k, rec := startKernel(t, nil)
	id := jupyter.NewID()
	m := &jupyter.Message{
		Channel: "shell",
		Header:  jupyter.NewHeader("client-session", id, "complete_request"),
		Content: []byte(`{"code": "import o", "cursor_pos": 8}`),
	}
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	if err := k.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	ms := rec.WaitFor(t, execTimeout, id, "complete_reply", func(ms []*jupyter.Message) bool { return kerneltest.Find(ms, "shell", "complete_reply") != nil })
	r := kerneltest.Find(ms, "shell", "complete_reply")
	if r.Parent.Session != "client-session" || !strings.Contains(string(r.Content), `"os"`) {
		t.Errorf("complete_reply parent %+v content %s", r.Parent, r.Content)
	}
	if err := k.Send(ctx, &jupyter.Message{Channel: "iopub"}); err == nil {
		t.Error("Send on iopub succeeded")
	}
}

// TestStuckSocketCutsTheKernel: a kernel that stops reading (a stopped
// process whose socket buffers are full) does not hold a sender forever:
// the write gives up after SendTimeout and the kernel is cut, its death
// saying why, before the heartbeat would have noticed.
func TestStuckSocketCutsTheKernel(t *testing.T) {
	k, _ := startKernel(t, func(o *Options) {
		o.SendTimeout = 500 * time.Millisecond
		o.HeartbeatTimeout = time.Minute
	})
	if err := syscall.Kill(k.Info().PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Far more than the socket buffers between aiod and a stopped kernel.
	code := "x = '" + strings.Repeat("a", 32<<20) + "'"
	t0 := time.Now()
	err := k.Execute(ctx, jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: code})
	if err == nil {
		t.Fatal("an execute to a stopped kernel's full socket succeeded")
	}
	// It gave up by SendTimeout, not by the caller's deadline (a wall
	// clock bound failed at 10.05 s under -race beside .ci/run: encoding
	// and signing 32 MiB takes that long there before the write blocks).
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the send ended by the caller's deadline after %s (%v), want by SendTimeout", time.Since(t0), err)
	}
	select {
	case <-k.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("Done not closed 15s after the send timed out")
	}
	var dead *jupyter.DeadError
	if err := k.Err(); !errors.As(err, &dead) || !strings.Contains(err.Error(), "writing to its shell socket failed") {
		t.Fatalf("Err = %v, want the failed write as the cause", err)
	}
	assertGone(t, k)
}
