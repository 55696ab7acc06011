package stream

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
)

// fakeRuntime is a scripted jupyter.Runtime for the session logic's unit
// tests: it answers nothing by itself; the test's script publishes what a
// kernel would. Route tests use real kernels; this only drives stream.
type fakeRuntime struct {
	h jupyter.Handler
	// script runs on Execute, on a goroutine of its own; nil answers like a
	// kernel running `pass`.
	script func(f *fakeRuntime, req jupyter.ExecuteRequest)
	// interrupt runs on Interrupt; nil publishes KeyboardInterrupt, idle and
	// the reply for the running request.
	interrupt func(f *fakeRuntime) error

	recv atomic.Uint64 // what Received says: bytes "arriving"

	mu      sync.Mutex
	sendErr error // Execute's answer when set: the runtime died unseen
	running jupyter.ExecuteRequest
	err     error
	closes  int
	done    chan struct{}
	wg      sync.WaitGroup
}

var errFakeClosed = errors.New("fake: closed")

// executing reports whether rt is a fake that has been handed an execution.
func executing(rt jupyter.Runtime) bool { return runningID(rt) != "" }

// runningID is the msg_id of the last request rt was given; "" for none
// or another kind of runtime.
func runningID(rt jupyter.Runtime) string {
	f, ok := rt.(*fakeRuntime)
	if !ok {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running.MsgID
}

// Received is what a kernel says of the bytes it has read so far.
func (f *fakeRuntime) Received() uint64 { return f.recv.Load() }

func (f *fakeRuntime) Execute(_ context.Context, req jupyter.ExecuteRequest) error {
	f.mu.Lock()
	if err := f.sendErr; err != nil {
		f.mu.Unlock()
		return err
	}
	f.running = req
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if f.script == nil {
			f.run(req, "ok")
			return
		}
		f.script(f, req)
	}()
	return nil
}

// run publishes a whole execution: busy, idle and the reply with status.
func (f *fakeRuntime) run(req jupyter.ExecuteRequest, status string) {
	f.status(req, jupyter.StateBusy)
	f.status(req, jupyter.StateIdle)
	f.reply(req, status)
}

func (f *fakeRuntime) publish(req jupyter.ExecuteRequest, channel, msgType string, content any) {
	b, _ := json.Marshal(content)
	f.mu.Lock()
	dead := f.err != nil
	f.mu.Unlock()
	if dead {
		return
	}
	f.h(&jupyter.Message{Channel: channel, Header: jupyter.NewHeader("fake", jupyter.NewID(), msgType),
		Parent: jupyter.Header{MsgID: req.MsgID, MsgType: jupyter.MsgExecuteRequest}, Content: b})
}

func (f *fakeRuntime) status(req jupyter.ExecuteRequest, state string) {
	f.publish(req, jupyter.IOPub, jupyter.MsgStatus, jupyter.StatusContent{ExecutionState: state})
}

func (f *fakeRuntime) reply(req jupyter.ExecuteRequest, status string) {
	f.publish(req, jupyter.Shell, jupyter.MsgExecuteReply, map[string]any{"status": status, "execution_count": 1})
}

func (f *fakeRuntime) print(req jupyter.ExecuteRequest, text string) {
	f.publish(req, jupyter.IOPub, jupyter.MsgStream, jupyter.StreamContent{Name: "stdout", Text: text})
}

func (f *fakeRuntime) Interrupt(context.Context) error {
	if f.interrupt != nil {
		return f.interrupt(f)
	}
	f.mu.Lock()
	req := f.running
	f.mu.Unlock()
	f.publish(req, jupyter.IOPub, jupyter.MsgError, jupyter.ErrorContent{Ename: "KeyboardInterrupt", Traceback: []string{"KeyboardInterrupt"}})
	f.status(req, jupyter.StateIdle)
	f.reply(req, "error")
	return nil
}

// die ends the runtime as a crash would.
func (f *fakeRuntime) die(cause string) {
	f.end(&jupyter.DeadError{Runtime: "kernel", Cause: cause, ExitCode: -1})
}

func (f *fakeRuntime) end(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
		close(f.done)
	}
}

func (f *fakeRuntime) Close(context.Context) error {
	f.mu.Lock()
	f.closes++
	f.mu.Unlock()
	f.end(errFakeClosed)
	return nil
}

func (f *fakeRuntime) Done() <-chan struct{} { return f.done }

func (f *fakeRuntime) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeRuntime) Info() jupyter.RuntimeInfo {
	return jupyter.RuntimeInfo{Backend: "fake", Language: "python", Name: "fake"}
}

// fakes is a Backend whose every start makes a fakeRuntime with the given
// script and interrupt, and keeps them for the test to look at.
type fakes struct {
	mu        sync.Mutex
	started   []*fakeRuntime
	script    func(f *fakeRuntime, req jupyter.ExecuteRequest)
	interrupt func(f *fakeRuntime) error
}

func (fs *fakes) backend() Backend {
	return Backend{Name: "kernel", Language: "python", Start: func(_ context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		f := &fakeRuntime{h: h, script: fs.script, interrupt: fs.interrupt, done: make(chan struct{})}
		fs.started = append(fs.started, f)
		return f, nil
	}}
}

// setScript changes the script of runtimes started from now on.
func (fs *fakes) setScript(script func(f *fakeRuntime, req jupyter.ExecuteRequest)) {
	fs.mu.Lock()
	fs.script = script
	fs.mu.Unlock()
}

func (f *fakeRuntime) closeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closes
}

func (fs *fakes) all() []*fakeRuntime {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]*fakeRuntime(nil), fs.started...)
}

// fakeRegistry is a registry with short graces, closed (and its fakes'
// goroutines waited for) at cleanup.
func fakeRegistry(t *testing.T, fs *fakes) *Registry {
	t.Helper()
	return fakeRegistryGrace(t, fs, 200*time.Millisecond)
}

// fakeRegistryGrace is fakeRegistry waiting grace for an idle after a
// reply.
func fakeRegistryGrace(t *testing.T, fs *fakes, grace time.Duration) *Registry {
	t.Helper()
	r := NewRegistry(Config{InterruptGrace: 300 * time.Millisecond, CompletionGrace: grace})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("close registry: %v", err)
		}
		for _, f := range fs.all() {
			f.wg.Wait()
		}
	})
	return r
}

func hangs(f *fakeRuntime, req jupyter.ExecuteRequest) { f.status(req, jupyter.StateBusy) }

// A timed-out call is interrupted; the session keeps its runtime.
func TestFakeTimeoutInterruptsAndKeepsState(t *testing.T) {
	fs := &fakes{script: hangs}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "t", fs.backend())
	res, err := sess.Execute(context.Background(), ExecRequest{Code: "loop", Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != execution.StatusTimeout || !strings.Contains(res.Message(), "timed out after 100ms; it was interrupted and the session kept its state") {
		t.Fatalf("timeout: %s %q", res.Status, res.Message())
	}
	if len(fs.all()) != 1 || sess.Runtime() != fs.all()[0] {
		t.Fatalf("the runtime was replaced after a successful interrupt (%d starts)", len(fs.all()))
	}
}

// A timeout whose interrupt lands after the code's result (in IPython's
// own code, which prints KeyboardInterrupt and replies error, or does not
// reply at all) answers ok: the code ran to its end, and the result is
// kept.
func TestFakeInterruptAfterTheResult(t *testing.T) {
	for _, reply := range []string{"error", ""} {
		// The interrupt reaches the code only after its result: on a
		// loaded machine the script's goroutine may start after the
		// 100 ms timeout.
		ran := make(chan struct{})
		fs := &fakes{script: func(f *fakeRuntime, req jupyter.ExecuteRequest) {
			f.status(req, jupyter.StateBusy)
			f.publish(req, jupyter.IOPub, jupyter.MsgExecuteResult, map[string]any{"data": map[string]any{"text/plain": "2"}, "metadata": map[string]any{}, "execution_count": 7})
			close(ran)
		}, interrupt: func(f *fakeRuntime) error {
			<-ran
			f.mu.Lock()
			req := f.running
			f.mu.Unlock()
			f.publish(req, jupyter.IOPub, jupyter.MsgStream, jupyter.StreamContent{Name: "stderr", Text: "\nKeyboardInterrupt\n\n"})
			f.status(req, jupyter.StateIdle)
			if reply != "" {
				f.reply(req, reply)
			}
			return nil
		}}
		reg := fakeRegistry(t, fs)
		sess, _, _ := reg.Open("", "python", "t", fs.backend())
		res, err := sess.Execute(context.Background(), ExecRequest{Code: "1+1", Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != execution.StatusOK || res.ErrorKind != "" || !strings.Contains(res.Message(), "timed out after 100ms, but the code had run to its end") {
			t.Errorf("reply %q: %s %s %q", reply, res.Status, res.ErrorKind, res.Message())
		}
		if len(res.Outputs) == 0 || res.Outputs[0].Type != "execute_result" || res.ExecutionCount == nil {
			t.Errorf("reply %q: outputs %+v, execution count %v", reply, res.Outputs, res.ExecutionCount)
		}
	}
}

// A timed-out call whose interrupt fails restarts the runtime, and the next
// call says the state is gone.
func TestFakeFailedInterruptRestarts(t *testing.T) {
	fs := &fakes{script: hangs, interrupt: func(*fakeRuntime) error { return errors.New("no control channel") }}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "t", fs.backend())
	res, _ := sess.Execute(context.Background(), ExecRequest{Code: "loop", Timeout: 100 * time.Millisecond})
	if res.Status != execution.StatusTimeout || !strings.Contains(res.Message(), "the interrupt failed (no control channel), so the kernel was restarted: session state was lost") {
		t.Fatalf("timeout: %s %q", res.Status, res.Message())
	}
	fs.setScript(nil)
	next, err := sess.Execute(context.Background(), ExecRequest{Code: "pass", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !next.Fresh || !strings.Contains(next.Message(), "it was restarted after a timeout") || len(fs.all()) != 2 {
		t.Fatalf("next call: fresh=%v %q, %d starts", next.Fresh, next.Message(), len(fs.all()))
	}
	// The old runtime is closed in the background: wait for it, bounded.
	c := fs.all()[0]
	for deadline := time.Now().Add(5 * time.Second); c.closeCount() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if c.closeCount() == 0 {
		t.Error("the runtime that did not answer the interrupt was never closed within 5 s")
	}
}

// A runtime that dies mid-call answers an error; the next call gets a
// fresh one and is told why.
func TestFakeRuntimeDeath(t *testing.T) {
	fs := &fakes{script: func(f *fakeRuntime, req jupyter.ExecuteRequest) {
		f.status(req, jupyter.StateBusy)
		f.print(req, "before\n")
		f.die("killed by signal SIGKILL")
	}}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "d", fs.backend())
	res, _ := sess.Execute(context.Background(), ExecRequest{Code: "crash", Timeout: 5 * time.Second})
	if res.Status != execution.StatusError || !strings.Contains(res.Message(), "the kernel died during execution: kernel died: killed by signal SIGKILL; the next call on this session starts a fresh one") {
		t.Fatalf("death: %s %q", res.Status, res.Message())
	}
	if res.Text("stdout") != "before\n" {
		t.Errorf("output before the death: %q", res.Text("stdout"))
	}
	if st := sess.State(); st != jupyter.StateDead {
		t.Errorf("state after the death: %q, want dead", st)
	}
	fs.setScript(nil)
	next, _ := sess.Execute(context.Background(), ExecRequest{Code: "pass", Timeout: time.Second})
	if !next.Fresh || next.Status != execution.StatusOK || !strings.Contains(next.Message(), "because the previous kernel died (kernel died: killed by signal SIGKILL)") {
		t.Fatalf("next call: %s fresh=%v %q", next.Status, next.Fresh, next.Message())
	}
	if st := sess.State(); st != jupyter.StateIdle {
		t.Errorf("state with a fresh runtime: %q, want idle", st)
	}
}

// A reply without its idle ends after the completion grace, keeps the
// outputs, and says that the closing status was lost.
func TestFakeLostIdle(t *testing.T) {
	fs := &fakes{script: func(f *fakeRuntime, req jupyter.ExecuteRequest) {
		f.status(req, jupyter.StateBusy)
		f.print(req, "out\n")
		f.reply(req, "ok")
	}}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "l", fs.backend())
	start := time.Now()
	res, _ := sess.Execute(context.Background(), ExecRequest{Code: "x", Timeout: 10 * time.Second})
	if res.Status != execution.StatusOK || res.Text("stdout") != "out\n" || !strings.Contains(res.Message(), "closing status message was lost") {
		t.Fatalf("lost idle: %s %q %q", res.Status, res.Text("stdout"), res.Message())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the call waited %s for a lost idle; the grace is 200 ms", took)
	}
}

// A message that is still arriving after the reply (the runtime's byte
// count grows, as a kernel's does while it reads a flood's message of
// megabytes on a loaded machine) is not a lost idle: the call waits for it
// past the completion grace (600 ms here) and has every output.
func TestFakeSlowMessageIsNotLost(t *testing.T) {
	fs := &fakes{script: func(f *fakeRuntime, req jupyter.ExecuteRequest) {
		f.status(req, jupyter.StateBusy)
		f.reply(req, "ok")
		for range 16 { // 1.6 s of bytes arriving (over two graces), no message whole
			f.recv.Add(1 << 20)
			time.Sleep(100 * time.Millisecond) // the bytes' pace: what the test is about
		}
		f.print(req, "the whole flood\n")
		f.status(req, jupyter.StateIdle)
	}}
	reg := fakeRegistry(t, fs)
	// A grace six times the bytes' pace: a loaded machine that wakes the
	// fake late (seen with -race beside .ci/run at 200 ms) still shows
	// progress within it.
	reg.cfg.CompletionGrace = 600 * time.Millisecond
	sess, _, _ := reg.Open("", "python", "s", fs.backend())
	res, _ := sess.Execute(context.Background(), ExecRequest{Code: "x", Timeout: 10 * time.Second})
	if res.Status != execution.StatusOK || res.Text("stdout") != "the whole flood\n" || res.Message() != "ok" {
		t.Fatalf("slow message: %s %q %q", res.Status, res.Text("stdout"), res.Message())
	}
}

// An idle without a reply (ipykernel 6.17 with a NUL in the code) is not
// success: the call ends after the completion grace with error_kind
// no_reply and keeps the outputs.
func TestFakeLostReply(t *testing.T) {
	fs := &fakes{script: func(f *fakeRuntime, req jupyter.ExecuteRequest) {
		f.status(req, jupyter.StateBusy)
		f.print(req, "out\n")
		f.status(req, jupyter.StateIdle)
	}}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "r", fs.backend())
	res, _ := sess.Execute(context.Background(), ExecRequest{Code: "x", Timeout: 10 * time.Second})
	if res.Status != execution.StatusError || res.ErrorKind != execution.KindNoReply || res.Text("stdout") != "out\n" ||
		!strings.Contains(res.Message(), "sent no reply") {
		t.Fatalf("lost reply: %s %s %q %q", res.Status, res.ErrorKind, res.Text("stdout"), res.Message())
	}
}

// Close ends a one-shot call in flight (its temporary session is the
// registry's): the call answers that aiod shut down, and Close returns.
func TestFakeShutdownEndsOneShotInFlight(t *testing.T) {
	fs := &fakes{script: hangs}
	reg := NewRegistry(Config{})
	sess, err := reg.Temp("", fs.backend())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *execution.Result, 1)
	go func() {
		res, _ := sess.Execute(context.Background(), ExecRequest{Code: "sleep", Timeout: time.Hour})
		got <- res
	}()
	for len(fs.all()) == 0 || sess.Runtime() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := reg.Close(ctx); err != nil {
		t.Fatalf("close with a one-shot in flight: %v", err)
	}
	select {
	case res := <-got:
		if res == nil || res.Status != execution.StatusError || !strings.Contains(res.Message(), "aiod shut down while the code ran") {
			t.Fatalf("the call in flight: %+v", res)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight did not end when the registry closed")
	}
	if _, err := reg.Temp("", fs.backend()); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("Temp after Close: %v, want ErrShuttingDown", err)
	}
	for _, f := range fs.all() {
		f.wg.Wait()
		if f.Err() == nil {
			t.Error("a runtime was left running")
		}
	}
}

// A cancelled call interrupts its code and answers.
func TestFakeCancelledCallInterrupts(t *testing.T) {
	fs := &fakes{script: hangs}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "c", fs.backend())
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res, err := sess.Execute(ctx, ExecRequest{Code: "loop", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != execution.StatusError || !strings.Contains(res.Message(), "the call was cancelled (context canceled); it was interrupted") {
		t.Fatalf("cancelled: %s %q", res.Status, res.Message())
	}
}

// Watchers see an execution's idle before its result, and its events
// carry the caller's origin.
func TestFakeResultAfterIdleWithOrigin(t *testing.T) {
	fs := &fakes{script: func(f *fakeRuntime, req jupyter.ExecuteRequest) {
		f.status(req, jupyter.StateBusy)
		f.print(req, "x\n")
		f.reply(req, "ok") // the reply first: the result may only follow the idle
		time.Sleep(20 * time.Millisecond)
		f.status(req, jupyter.StateIdle)
	}}
	// The idle is awaited for a minute: on a loaded machine the script's
	// 20 ms can pass a short grace, and the result would then rightly
	// come without it.
	reg := fakeRegistryGrace(t, fs, time.Minute)
	sess, _, _ := reg.Open("", "python", "o", fs.backend())
	w := newRecorder()
	sess.Mux().Watch(w)
	origin := &struct{ name string }{"socket"}
	for i := 0; i < 20; i++ {
		res, _ := sess.Execute(context.Background(), ExecRequest{Code: "x", Timeout: 5 * time.Second, Origin: origin})
		var idle, result = -1, -1
		for j, e := range w.all() {
			if e.ExecID != res.ID {
				continue
			}
			if e.Origin != origin {
				t.Fatalf("event %d of execution %d has origin %v", j, i, e.Origin)
			}
			if e.State == jupyter.StateIdle {
				idle = j
			}
			if e.Result != nil {
				result = j
			}
		}
		if idle < 0 || result < idle {
			t.Fatalf("execution %d: idle at %d, result at %d", i, idle, result)
		}
	}
}

// RuntimeChanges tells of every change of the session's runtime: a start,
// a restart, a death noticed by the next call, Close.
func TestFakeRuntimeChanges(t *testing.T) {
	fs := &fakes{}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "rc", fs.backend())
	changed := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		default:
			t.Fatalf("%s: RuntimeChanges' channel not closed", what)
		}
	}
	rt, ch := sess.RuntimeChanges()
	if rt != nil {
		t.Fatalf("before any start: %v", rt)
	}
	first, err := sess.EnsureRuntime(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	changed("start", ch)
	rt, ch = sess.RuntimeChanges()
	if rt != first {
		t.Fatalf("after the start: %v, want %v", rt, first)
	}
	if _, again := sess.RuntimeChanges(); again != ch {
		t.Fatal("a second look without a change got another channel")
	}
	second, err := sess.Restart(context.Background(), "a test")
	if err != nil {
		t.Fatal(err)
	}
	changed("restart", ch)
	rt, ch = sess.RuntimeChanges()
	if rt != second || rt == first {
		t.Fatalf("after the restart: %v, want the new %v", rt, second)
	}
	second.(*fakeRuntime).die("killed by signal SIGKILL")
	if _, err := sess.Execute(context.Background(), ExecRequest{Code: "pass", Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	changed("a death, and a fresh runtime", ch)
	_, ch = sess.RuntimeChanges()
	sess.Close(context.Background(), ClosedDeleted)
	changed("close", ch)
	if rt, _ := sess.RuntimeChanges(); rt != nil {
		t.Fatalf("after close: %v", rt)
	}
}

// A runtime that died just before a call, before its end was seen, fails
// the call's send: the code never reached it, so it runs in a fresh
// runtime, and the answer says so.
func TestSendToARuntimeDeadUnseenRunsInAFreshOne(t *testing.T) {
	reg := newTestRegistry(t)
	fs := &fakes{}
	s, _, err := reg.Open("", "python", "s", fs.backend())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res, err := s.Execute(ctx, ExecRequest{Code: "1", Timeout: time.Minute}); err != nil || res.Status != execution.StatusOK {
		t.Fatalf("first call: %+v %v", res, err)
	}
	first := fs.all()[0]
	first.mu.Lock()
	first.sendErr = errors.New("zmq4: read/write on closed connection")
	first.mu.Unlock()
	res, err := s.Execute(ctx, ExecRequest{Code: "2", Timeout: time.Minute})
	if err != nil || res.Status != execution.StatusOK || !res.Fresh {
		t.Fatalf("after the unseen death: %+v %v", res, err)
	}
	if n := len(fs.all()); n != 2 {
		t.Fatalf("%d runtimes started, want the dead one and a fresh one", n)
	}
	waitFor(t, func() bool { return first.closeCount() > 0 }) // discarded runtimes close in the background

}

// notifyingFake calls back when it is done (jupyter.DoneNotifier), behind
// a wrapper that only unwraps to it, as the limits' wrapper does.
type notifyingFake struct {
	*fakeRuntime
	asked *atomic.Int32
	ran   chan<- struct{} // told once a callback has run
}

func (n notifyingFake) AfterDone(f func()) func() bool {
	n.asked.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-n.done; cancel() }()
	return context.AfterFunc(ctx, func() { f(); n.ran <- struct{}{} })
}

type unwrapsTo struct{ jupyter.Runtime }

func (u unwrapsTo) Unwrap() jupyter.Runtime { return u.Runtime }

// The death of a runtime that calls back when it is done (a local kernel)
// is counted through that call, found behind a wrapper, with no goroutine
// of the registry's waiting on Done; a runtime closed on purpose is not a
// death.
func TestDeathCountedThroughAfterDone(t *testing.T) {
	fs := &fakes{}
	var asked atomic.Int32
	ran := make(chan struct{}, 4)
	b := fs.backend()
	start := b.Start
	b.Start = func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
		rt, err := start(ctx, h)
		return unwrapsTo{notifyingFake{rt.(*fakeRuntime), &asked, ran}}, err
	}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "n", b)
	for i := range 2 {
		if res, _ := sess.Execute(context.Background(), ExecRequest{Code: "pass", Timeout: 5 * time.Second}); res.Status != execution.StatusOK {
			t.Fatalf("call %d: %s %q", i, res.Status, res.Message())
		}
		if i == 0 {
			fs.all()[0].die("killed by signal SIGKILL")
			<-ran // the callback that counts the death has run
			if n := reg.counters.Get(RuntimeDeaths, Labels("python", "other")); n != 1 {
				t.Fatalf("deaths counted after the callback: %d, want 1", n)
			}
		}
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("AfterDone asked %d times, want once per runtime (2)", n)
	}
	if !reg.DeleteSession(context.Background(), sess) {
		t.Fatal("the session was not deleted")
	}
	if n := reg.counters.Get(RuntimeDeaths, Labels("python", "other")); n != 1 {
		t.Errorf("deaths counted: %d, want the one (a runtime closed on purpose is none)", n)
	}
}

// HeldBytes counts a fixed cost per live runtime (named sessions with one,
// temporary ones) and what the collectors of running executions hold; an
// idle session's mux adds nothing, and a finished execution's output
// leaves the collectors' part.
func TestRegistryHeldBytes(t *testing.T) {
	release, printed := make(chan struct{}), make(chan struct{})
	fs := &fakes{script: func(f *fakeRuntime, req jupyter.ExecuteRequest) {
		f.status(req, jupyter.StateBusy)
		f.print(req, strings.Repeat("h", 5000)) // handed to the mux, and so to the collector, before it returns
		close(printed)
		<-release
		f.status(req, jupyter.StateIdle)
		f.reply(req, "ok")
	}}
	reg := fakeRegistry(t, fs)
	runtimes := func() int64 { held, buffers := reg.HeldBytes(); return (held - buffers) / runtimeCost }
	for _, id := range []string{"a", "b", "c"} {
		if _, _, err := reg.Open("", "python", id, fs.backend()); err != nil {
			t.Fatal(err)
		}
	}
	if n := runtimes(); n != 0 {
		t.Fatalf("three sessions never run: %d runtimes counted", n)
	}
	a := reg.Get("", "python", "a")
	done := make(chan *execution.Result, 1)
	go func() {
		res, _ := a.Execute(context.Background(), ExecRequest{Code: "print", Timeout: time.Minute})
		done <- res
	}()
	<-printed
	if _, buffers := reg.HeldBytes(); buffers < 5000 {
		t.Fatalf("the running execution's 5,000 bytes are not counted: %d", buffers)
	}
	if n := runtimes(); n != 1 {
		t.Fatalf("one session running: %d runtimes counted", n)
	}
	close(release)
	if res := <-done; res.Status != execution.StatusOK {
		t.Fatalf("the execution: %s %q", res.Status, res.Message())
	}
	_, before := reg.HeldBytes()
	if !reg.DeleteSession(context.Background(), a) {
		t.Fatal("a was not deleted")
	}
	if n := runtimes(); n != 0 {
		t.Fatalf("the session deleted: %d runtimes counted", n)
	}
	if _, after := reg.HeldBytes(); after != before {
		t.Fatalf("buffers moved from %d to %d with nothing running", before, after)
	}
}
