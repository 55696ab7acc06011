package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
)

// The gate grants slots in arrival order, refuses at once past its queue
// and refuses a start that waited too long; a refusal says the limit, the
// flag and when to retry.
func TestGateFairBoundedAndTimed(t *testing.T) {
	g := newGate(Admission{MaxStarts: 1, StartQueue: 3, StartQueueWait: 2 * time.Second})
	first, err := g.acquire(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, err := g.acquire(context.Background(), "")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			rel()
		}()
		waitFor(t, func() bool { return g.stats().Queued == i+1 }) // arrival order is i
	}
	_, err = g.acquire(context.Background(), "")
	var le *LimitError
	if !errors.As(err, &le) || !le.Busy() || le.Reason != RejectQueueFull || !strings.Contains(le.Msg, "--start-queue 3") || le.RetrySeconds() < 1 {
		t.Fatalf("past the queue: %v", err)
	}
	first()
	wg.Wait()
	if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Errorf("grant order %v, want [0 1 2]", order)
	}
	if st := g.stats(); st.Starting != 0 || st.Queued != 0 {
		t.Errorf("after all released: %+v", st)
	}

	g = newGate(Admission{MaxStarts: 1, StartQueue: 3, StartQueueWait: 200 * time.Millisecond})
	hold, _ := g.acquire(context.Background(), "")
	defer hold()
	began := time.Now()
	_, err = g.acquire(context.Background(), "")
	if !errors.As(err, &le) || le.Reason != RejectQueueWait || !strings.Contains(le.Msg, "--start-queue-timeout") {
		t.Fatalf("waited past the deadline: %v", err)
	}
	if took := time.Since(began); took < 200*time.Millisecond || took > 10*time.Second {
		t.Errorf("refused after %s, want about 200ms", took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.acquire(ctx, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
	if st := g.stats(); st.Queued != 0 {
		t.Errorf("a refused waiter stayed in line: %+v", st)
	}
}

// A tenant's burst of starts does not queue another tenant's start behind
// it all: a freed slot goes to the waiter whose tenant holds the fewest,
// the earliest among those.
func TestGateSharesSlotsAmongTenants(t *testing.T) {
	g := newGate(Admission{MaxStarts: 2, StartQueue: 16, StartQueueWait: time.Minute})
	var held []func()
	for range 2 {
		rel, err := g.acquire(context.Background(), "alice")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, rel)
	}
	granted := make(chan string, 8)
	var wg sync.WaitGroup
	queue := func(party string) {
		n := g.stats().Queued
		wg.Go(func() {
			rel, err := g.acquire(context.Background(), party)
			if err != nil {
				t.Errorf("%s: %v", party, err)
				return
			}
			granted <- party
			rel()
		})
		waitFor(t, func() bool { return g.stats().Queued == n+1 })
	}
	for range 4 {
		queue("alice")
	}
	queue("bob")
	held[0]() // alice still holds one, bob none: bob's turn, though he came last
	if got := <-granted; got != "bob" {
		t.Fatalf("the first slot freed went to %s, want bob", got)
	}
	held[1]()
	wg.Wait()
	close(granted)
	n := 0
	for p := range granted {
		if p != "alice" {
			t.Errorf("then %s", p)
		}
		n++
	}
	if n != 4 {
		t.Errorf("%d of alice's 4 starts granted", n)
	}
	if st := g.stats(); st.Starting != 0 || st.Queued != 0 || len(g.held) != 0 {
		t.Errorf("after all released: %+v, held %v", st, g.held)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// The session caps count named and one-shot sessions, per caller too; a
// delete or a release frees a slot at once, and using an existing session
// is never refused.
func TestSessionCaps(t *testing.T) {
	fs := &fakes{}
	reg := NewRegistry(Config{Admission: Admission{MaxSessions: 3, MaxSessionsPerKey: 2}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	b := fs.backend()
	if _, _, err := reg.OpenFor("alice", "alice", "python", "a1", b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.OpenFor("alice", "alice", "python", "a2", b); err != nil {
		t.Fatal(err)
	}
	_, _, err := reg.OpenFor("alice", "alice", "python", "a3", b)
	var le *LimitError
	if !errors.As(err, &le) || le.Busy() || le.Reason != RejectSessionsKey ||
		!strings.Contains(le.Msg, "has 2 live sessions") || !strings.Contains(le.Msg, "--max-sessions-per-key 2") {
		t.Fatalf("third for one caller: %v", err)
	}
	if _, created, err := reg.OpenFor("alice", "alice", "python", "a1", b); err != nil || created {
		t.Fatalf("reusing a session: created=%v %v", created, err)
	}
	tmp, err := reg.TempFor("bob", "bob", b)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = reg.OpenFor("carol", "carol", "python", "c1", b)
	if !errors.As(err, &le) || le.Reason != RejectSessions || !strings.Contains(le.Msg, "3 sessions are live") ||
		!strings.Contains(le.Msg, "--max-sessions 3") || le.RetrySeconds() > 2 {
		t.Fatalf("over the cap with a one-shot in flight: %v (retry %d s)", err, le.RetrySeconds())
	}
	if _, err := reg.TempFor("carol", "carol", b); !errors.As(err, &le) {
		t.Fatalf("a one-shot over the cap: %v", err)
	}
	reg.Release(tmp)
	if _, _, err := reg.OpenFor("carol", "carol", "python", "c1", b); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if !reg.DeleteOne(context.Background(), "alice", "python", "a1") {
		t.Fatal("delete a1")
	}
	if _, _, err := reg.OpenFor("alice", "alice", "python", "a3", b); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	if st := reg.AdmissionStats(); st.Live != 3 {
		t.Errorf("live %d, want 3", st.Live)
	}
	if n := reg.Counters().Get(AdmissionRejects, RejectSessions) + reg.Counters().Get(AdmissionRejects, RejectSessionsKey); n != 3 {
		t.Errorf("rejects counted %d, want 3", n)
	}
}

// A process admitted outside any session (AdmitProcess) counts against the
// caps like a one-shot session until done, per caller too, and waits its
// turn at the start gate until started.
func TestAdmitProcess(t *testing.T) {
	fs := &fakes{}
	reg := NewRegistry(Config{Admission: Admission{MaxSessions: 2, MaxSessionsPerKey: 1, MaxStarts: 1, StartQueue: 0, StartQueueWait: time.Second}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	started, done, err := reg.AdmitProcess(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if st := reg.AdmissionStats(); st.Live != 1 || st.Gate.Starting != 1 {
		t.Fatalf("one admitted, not started: %+v", st)
	}
	var le *LimitError
	if _, _, err := reg.AdmitProcess(context.Background(), "alice"); !errors.As(err, &le) || le.Reason != RejectSessionsKey {
		t.Fatalf("alice's second: %v", err)
	}
	if _, _, err := reg.AdmitProcess(context.Background(), "bob"); !errors.As(err, &le) || !le.Busy() || le.Reason != RejectQueueFull {
		t.Fatalf("bob's while alice's start holds the only slot: %v", err)
	}
	if st := reg.AdmissionStats(); st.Live != 1 {
		t.Fatalf("a refused start kept its slot: %+v", st)
	}
	started()
	started() // idempotent
	bobStarted, bobDone, err := reg.AdmitProcess(context.Background(), "bob")
	if err != nil {
		t.Fatalf("bob's after alice's started: %v", err)
	}
	bobStarted()
	_, _, err = reg.OpenFor("carol", "carol", "javascript", "c1", fs.backend())
	if !errors.As(err, &le) || le.Reason != RejectSessions || !strings.Contains(le.Msg, "2 sessions are live") || le.RetrySeconds() > 2 {
		t.Fatalf("a session over the cap with two processes in flight: %v", err)
	}
	done()
	done() // idempotent
	bobDone()
	if st := reg.AdmissionStats(); st.Live != 0 || st.Gate.Starting != 0 {
		t.Fatalf("after both are done: %+v", st)
	}
	if _, _, err := reg.OpenFor("carol", "carol", "javascript", "c1", fs.backend()); err != nil {
		t.Fatalf("after they are done: %v", err)
	}
	_, d, err := reg.AdmitProcess(context.Background(), "dave")
	if err != nil {
		t.Fatal(err)
	}
	d() // done without started gives the start slot back too
	if st := reg.AdmissionStats(); st.Gate.Starting != 0 || st.Live != 1 {
		t.Fatalf("done before started: %+v", st)
	}
}

// Error kinds: a raised exception, a timeout, an interrupt and a death by
// the memory limit are told apart; the next call after the memory death
// runs fresh and says why.
func TestErrorKinds(t *testing.T) {
	fs := &fakes{}
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "python", "k", fs.backend())
	fs.setScript(func(f *fakeRuntime, req jupyter.ExecuteRequest) {
		f.status(req, jupyter.StateBusy)
		f.publish(req, jupyter.IOPub, jupyter.MsgError, map[string]any{"ename": "ValueError", "evalue": "x", "traceback": []string{}})
		f.status(req, jupyter.StateIdle)
		f.reply(req, "error")
	})
	res, _ := sess.Execute(context.Background(), ExecRequest{Code: "raise", Timeout: 5 * time.Second})
	if res.ErrorKind != execution.KindException {
		t.Errorf("exception: kind %q", res.ErrorKind)
	}
	oom := &fakes{script: func(f *fakeRuntime, req jupyter.ExecuteRequest) {
		f.status(req, jupyter.StateBusy)
		f.end(&jupyter.DeadError{Runtime: "kernel", Cause: "killed by signal SIGKILL", ExitCode: -1, Signal: "SIGKILL",
			Kind: jupyter.DeathOutOfMemory, Limit: "512 MiB (--runtime-memory-limit)"})
	}}
	s2, _, _ := reg.Open("", "python", "oom", oom.backend())
	res, _ = s2.Execute(context.Background(), ExecRequest{Code: "x = bytearray(2 << 30)", Timeout: 5 * time.Second})
	if res.ErrorKind != execution.KindOutOfMemory || !strings.Contains(res.Message(), "killed by its memory limit (512 MiB (--runtime-memory-limit))") ||
		!strings.Contains(res.Message(), "state was lost") {
		t.Fatalf("oom: kind %q %q", res.ErrorKind, res.Message())
	}
	oom.setScript(nil)
	res, _ = s2.Execute(context.Background(), ExecRequest{Code: "pass", Timeout: 5 * time.Second})
	if !res.Fresh || res.ErrorKind != "" || !strings.Contains(res.Message(), "memory limit") {
		t.Fatalf("after oom: fresh=%v kind %q %q", res.Fresh, res.ErrorKind, res.Message())
	}
	fs.setScript(hangs)
	s3, _, _ := reg.Open("", "python", "t", fs.backend())
	res, _ = s3.Execute(context.Background(), ExecRequest{Code: "loop", Timeout: 100 * time.Millisecond})
	if res.Status != execution.StatusTimeout || res.ErrorKind != execution.KindTimeout {
		t.Errorf("timeout: %s kind %q", res.Status, res.ErrorKind)
	}
	// The runtime still names the timed-out request as running: wait
	// until it was given the next one, or the interrupt is the old one's.
	timedOut := runningID(s3.Runtime())
	done := make(chan *execution.Result, 1)
	go func() {
		r, _ := s3.Execute(context.Background(), ExecRequest{Code: "loop", Timeout: 10 * time.Second})
		done <- r
	}()
	waitFor(t, func() bool { id := runningID(s3.Runtime()); return s3.Busy() && id != "" && id != timedOut })
	if err := s3.Interrupt(context.Background(), "a test"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.ErrorKind != execution.KindInterrupted {
		t.Errorf("interrupted: %s kind %q %q", r.Status, r.ErrorKind, r.Message())
	}
}

// A client's interrupt the runtime ignores (no message at all) is handled
// as a timeout's after the interrupt grace: repeated, then the runtime is
// restarted, and the answer says so instead of waiting for the timeout.
func TestIgnoredClientInterruptRestarts(t *testing.T) {
	fs := &fakes{script: hangs, interrupt: func(*fakeRuntime) error { return nil }}
	done, began := interruptLoop(t, fs, "deaf")
	var res *execution.Result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("an ignored interrupt left the call running")
	}
	if res.ErrorKind != execution.KindInterrupted || !strings.HasPrefix(res.Message(), "execution was interrupted by a client (test), but the runtime showed no sign of it") ||
		!strings.Contains(res.Message(), "restarted") {
		t.Fatalf("kind %q, message %q", res.ErrorKind, res.Message())
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("answered %s after the interrupt", took)
	}
	if n := len(fs.all()); n != 1 {
		t.Fatalf("%d runtimes started, want 1", n)
	}
	waitFor(t, func() bool { return fs.all()[0].closeCount() > 0 }) // closed in the background
}

// TestLateBusyIsNoSignOfAnInterrupt: the busy status of the execution's
// start, arriving only after a client asked to interrupt it (a loaded
// machine), is not the runtime reacting: an interrupt it otherwise
// ignores still restarts it.
func TestLateBusyIsNoSignOfAnInterrupt(t *testing.T) {
	fs := &fakes{script: func(*fakeRuntime, jupyter.ExecuteRequest) {}, interrupt: func(f *fakeRuntime) error {
		f.mu.Lock()
		req := f.running
		f.mu.Unlock()
		// The start's message, late: delivered a moment after the ask,
		// within the interrupt's grace (300 ms here). Later than that,
		// the test proves less but cannot fail for it.
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			time.Sleep(100 * time.Millisecond)
			f.status(req, jupyter.StateBusy)
		}()
		return nil
	}}
	done, _ := interruptLoop(t, fs, "late")
	select {
	case res := <-done:
		if res.ErrorKind != execution.KindInterrupted || !strings.Contains(res.Message(), "restarted") {
			t.Fatalf("kind %q, message %q", res.ErrorKind, res.Message())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a late busy status was taken for the runtime heeding the interrupt: the call ran on")
	}
}

// interruptLoop runs a loop of a minute in a new session id of fs's
// runtimes and has a client interrupt it once it runs; the call's result
// comes on done.
func interruptLoop(t *testing.T, fs *fakes, id string) (done chan *execution.Result, asked time.Time) {
	t.Helper()
	reg := fakeRegistry(t, fs)
	sess, _, _ := reg.Open("", "javascript", id, fs.backend())
	done = make(chan *execution.Result, 1)
	go func() {
		r, _ := sess.Execute(context.Background(), ExecRequest{Code: "while (true) {}", Timeout: time.Minute})
		done <- r
	}()
	waitFor(t, func() bool { return sess.Busy() && executing(sess.Runtime()) })
	asked = time.Now()
	if err := sess.Interrupt(context.Background(), "a client (test)"); err != nil {
		t.Fatal(err)
	}
	return done, asked
}

// TestPoolRefillsUnderTheGate: a pool's refill waits for a start slot as
// a session start does, and starts once the slot is free.
func TestPoolRefillsUnderTheGate(t *testing.T) {
	fs := &fakes{}
	gate := NewStartGate(Admission{MaxStarts: 1, StartQueue: 4, StartQueueWait: time.Minute})
	release, err := gate.Acquire(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPool(PoolConfig{Name: "kernel", Size: 1, Start: fs.backend().Start, Gate: gate})
	defer p.Close(context.Background())
	time.Sleep(200 * time.Millisecond) // time for a refill that must not start
	if n := len(fs.all()); n != 0 {
		t.Fatalf("the pool started %d runtimes while the only start slot was taken", n)
	}
	release()
	waitFor(t, func() bool { return p.Ready() == 1 })
	if st := gate.g.stats(); st.Starting != 0 || st.Queued != 0 {
		t.Errorf("gate after the refill: %+v, want the slot back", st)
	}
}

// TestPoolCloseBoundedByItsContext: a start that ignores its cancelled
// context (a wedged process) does not hold Close past Close's own
// context; Close says so, and the runtime that start hands over late is
// closed, not kept.
func TestPoolCloseBoundedByItsContext(t *testing.T) {
	fs := &fakes{}
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	start := func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
		once.Do(func() { close(entered) })
		<-unblock // ignores ctx
		return fs.backend().Start(ctx, h)
	}
	p := NewPool(PoolConfig{Name: "kernel", Size: 1, Start: start})
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := p.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "prewarm pool kernel: a runtime start under way did not end") {
		t.Fatalf("Close with a wedged start: %v, want the pool to say a start did not end", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("Close took %s with a 200 ms context", d)
	}
	close(unblock)
	waitFor(t, func() bool { return len(fs.all()) == 1 && fs.all()[0].closeCount() == 1 })
	if p.Ready() != 0 {
		t.Errorf("%d runtimes ready after Close", p.Ready())
	}
}

// A start slot is held for aiod's part of a start only: once the
// runtime's process runs (jupyter.Launched), its own start-up (a tenant's
// startup files that sleep) no longer holds the slot, and another
// session's start goes ahead.
func TestStartSlotFreedOnceLaunched(t *testing.T) {
	fs := &fakes{}
	reg := NewRegistry(Config{Admission: Admission{MaxStarts: 1, StartQueue: 4, StartQueueWait: time.Minute}})
	hold := make(chan struct{})
	t.Cleanup(func() {
		close(hold)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	slow := fs.backend()
	fast := slow.Start
	inside := make(chan struct{}, 3)
	slow.Start = func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
		jupyter.Launched(ctx)
		inside <- struct{}{}
		select { // the runtime's own start-up: a startup file that sleeps
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return fast(ctx, h)
	}
	for i := range 3 {
		s, _, err := reg.OpenFor("alice", "alice", "python", fmt.Sprintf("slow%d", i), slow)
		if err != nil {
			t.Fatal(err)
		}
		go s.EnsureRuntime(context.Background()) //nolint:errcheck // ends with the registry
		select {                                 // its start-up has begun (holding, before the fix, the only slot)
		case <-inside:
		case <-time.After(30 * time.Second):
			t.Fatalf("start %d never began: the one before it holds the only slot through its start-up", i)
		}
	}
	b, _, err := reg.OpenFor("bob", "bob", "python", "b", fs.backend())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.EnsureRuntime(ctx); err != nil {
		t.Fatalf("bob's start behind alice's three hanging start-ups: %v", err)
	}
}
