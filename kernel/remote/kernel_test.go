package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/aiod/aiod/kernel/remote/remotetest"
)

// protocols runs body against a server that selects the v1 subprotocol
// (jupyter_server 1.23's default) and one that selects none (the legacy
// JSON framing that Enterprise Gateway speaks).
func protocols(t *testing.T, body func(t *testing.T, s *jupyterServer, want string)) {
	t.Run("v1", func(t *testing.T) { body(t, startJupyter(t), SubprotocolV1) })
	t.Run("legacy", func(t *testing.T) { body(t, startJupyter(t, "--ServerApp.kernel_ws_protocol="), "") })
}

func TestExecute(t *testing.T) {
	t.Parallel()
	protocols(t, func(t *testing.T, s *jupyterServer, want string) {
		k, rec := startKernel(t, s, nil)
		if got := k.Subprotocol(); got != want {
			t.Errorf("Subprotocol() = %q, want %q", got, want)
		}
		info := k.Info()
		if info.Backend != "jupyter" || info.Language != "python" || info.Name != "python3" || info.PID != 0 ||
			!strings.HasPrefix(info.Version, "3.") {
			t.Errorf("Info() = %+v", info)
		}

		t.Run("print", func(t *testing.T) {
			id := send(t, k, `print("hi")`)
			ms := rec.WaitFor(t, execTimeout, id, "reply and idle", kerneltest.Complete)
			if got := kerneltest.StreamText(ms, "stdout"); got != "hi\n" {
				t.Errorf("stdout = %q, want %q; messages %s", got, "hi\n", kerneltest.Summary(ms))
			}
			checkShape(t, id, ms, "ok")
		})
		t.Run("error", func(t *testing.T) {
			id := send(t, k, `1/0`)
			ms := rec.WaitFor(t, execTimeout, id, "reply and idle", kerneltest.Complete)
			e := kerneltest.Find(ms, "iopub", "error")
			if e == nil || kerneltest.Field(e, "ename") != "ZeroDivisionError" {
				t.Fatalf("no ZeroDivisionError on iopub: %s", kerneltest.Summary(ms))
			}
			checkShape(t, id, ms, "error")
		})
		t.Run("display_data", func(t *testing.T) {
			id := send(t, k, `from IPython.display import display, HTML; display(HTML("<b>x</b>"))`)
			ms := rec.WaitFor(t, execTimeout, id, "reply and idle", kerneltest.Complete)
			d := kerneltest.Find(ms, "iopub", "display_data")
			if d == nil || !strings.Contains(string(d.Content), `"text/html":"<b>x</b>"`) &&
				!strings.Contains(string(d.Content), `"text/html": "<b>x</b>"`) {
				t.Fatalf("no display_data with the HTML: %s", kerneltest.Summary(ms))
			}
			checkShape(t, id, ms, "ok")
		})
		if st := k.Stats(); st.Malformed != 0 || st.Reconnects != 0 {
			t.Errorf("Stats() = %+v", st)
		}
	})
}

// checkShape checks the messages of one execution, in what Jupyter orders
// only within a channel: on iopub, status busy first, then execute_input,
// status idle last; on shell, one execute_reply with status want. Across
// channels nothing is ordered (the reply may come before busy). Each is
// parented to id and delivered once.
func checkShape(t testing.TB, id string, ms []*jupyter.Message, want string) {
	t.Helper()
	var iopub []*jupyter.Message
	for _, m := range ms {
		if m.Channel == "iopub" {
			iopub = append(iopub, m)
		}
	}
	state := func(i int) string {
		if i < 0 || i >= len(iopub) || iopub[i].Header.MsgType != "status" {
			return ""
		}
		return kerneltest.Field(iopub[i], "execution_state")
	}
	if state(0) != "busy" {
		t.Errorf("first iopub message is not status busy: %s", kerneltest.Summary(ms))
	}
	if len(iopub) < 2 || iopub[1].Header.MsgType != "execute_input" {
		t.Errorf("execute_input does not follow busy on iopub: %s", kerneltest.Summary(ms))
	}
	if state(len(iopub)-1) != "idle" {
		t.Errorf("last iopub message is not status idle: %s", kerneltest.Summary(ms))
	}
	replies := 0
	for _, m := range ms {
		if m.Channel == "shell" && m.Header.MsgType == "execute_reply" {
			replies++
		}
	}
	if replies != 1 {
		t.Errorf("%d execute_replies on shell, want 1: %s", replies, kerneltest.Summary(ms))
	}
	if reply := kerneltest.Find(ms, "shell", "execute_reply"); reply != nil && kerneltest.Field(reply, "status") != want {
		t.Errorf("execute_reply status = %q, want %q", kerneltest.Field(reply, "status"), want)
	}
	seen := map[string]bool{}
	for _, m := range ms {
		if m.Parent.MsgID != id {
			t.Errorf("%s parented to %q, want %q", m.Header.MsgType, m.Parent.MsgID, id)
		}
		if seen[m.Header.MsgID] {
			t.Errorf("%s %s delivered twice", m.Header.MsgType, m.Header.MsgID)
		}
		seen[m.Header.MsgID] = true
	}
}

// checkShape accepts the shell reply before iopub's busy (channels are not
// ordered against each other) and still refuses disorder within iopub.
func TestCheckShapeOrdersWithinChannels(t *testing.T) {
	t.Parallel()
	msg := func(channel, typ, content string) *jupyter.Message {
		m := &jupyter.Message{Channel: channel, Header: jupyter.NewHeader("k", jupyter.NewID(), typ), Content: []byte(content)}
		m.Parent.MsgID = "req"
		return m
	}
	busy, idle := msg("iopub", "status", `{"execution_state":"busy"}`), msg("iopub", "status", `{"execution_state":"idle"}`)
	input, out := msg("iopub", "execute_input", `{}`), msg("iopub", "stream", `{"name":"stdout","text":"hi\n"}`)
	reply := msg("shell", "execute_reply", `{"status":"ok"}`)
	for _, tc := range []struct {
		name string
		ms   []*jupyter.Message
		ok   bool
	}{
		{"reply last", []*jupyter.Message{busy, input, out, idle, reply}, true},
		{"reply first", []*jupyter.Message{reply, busy, input, out, idle}, true},
		{"reply in between", []*jupyter.Message{busy, reply, input, out, idle}, true},
		{"idle before busy", []*jupyter.Message{idle, input, out, busy, reply}, false},
		{"output after idle", []*jupyter.Message{busy, input, idle, out, reply}, false},
		{"no reply", []*jupyter.Message{busy, input, out, idle}, false},
	} {
		r := &errorRecorder{TB: t}
		checkShape(r, "req", tc.ms, "ok")
		if got := len(r.errs) == 0; got != tc.ok {
			t.Errorf("%s: accepted %v, want %v (%q)", tc.name, got, tc.ok, r.errs)
		}
	}
}

// errorRecorder is a testing.TB whose Errorf is recorded, not reported.
type errorRecorder struct {
	testing.TB
	errs []string
}

func (r *errorRecorder) Helper() {}
func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestInterrupt(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	k, rec := startKernel(t, s, nil)
	execute(t, k, rec, "x = 42")
	id := send(t, k, "print('begun', flush=True)\nwhile True: pass")
	rec.WaitFor(t, execTimeout, id, "begun on stdout", func(ms []*jupyter.Message) bool {
		return kerneltest.StreamText(ms, "stdout") != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	ms := rec.WaitFor(t, execTimeout, id, "reply and idle", kerneltest.Complete)
	if e := kerneltest.Find(ms, "iopub", "error"); e == nil || kerneltest.Field(e, "ename") != "KeyboardInterrupt" {
		t.Fatalf("no KeyboardInterrupt: %s", kerneltest.Summary(ms))
	}
	if got := stdout(execute(t, k, rec, "print(x)")); got != "42\n" {
		t.Errorf("x after the interrupt: %q, want 42", got)
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	k, rec := startKernel(t, s, nil)
	execute(t, k, rec, "x = 1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	ms := execute(t, k, rec, "x")
	if e := kerneltest.Find(ms, "iopub", "error"); e == nil || kerneltest.Field(e, "ename") != "NameError" {
		t.Fatalf("x survived the restart: %s", kerneltest.Summary(ms))
	}
	if got := stdout(execute(t, k, rec, "print('after')")); got != "after\n" {
		t.Errorf("stdout after restart = %q", got)
	}
	if err := k.Err(); err != nil {
		t.Errorf("Err() after a Restart = %v", err)
	}
}

// The channels socket dropped mid-execution is reopened with the same
// session id; the server replays what the kernel published meanwhile and
// every output arrives exactly once.
func TestReconnect(t *testing.T) {
	t.Parallel()
	protocols(t, func(t *testing.T, s *jupyterServer, want string) {
		k, rec := startKernel(t, s, nil)
		// Outputs published during an outage are buffered by the server once
		// it has seen the socket close; one it writes before that is lost
		// (Jupyter Server logs WebSocketClosedError and drops it), which a
		// loaded machine made happen with prints 0.3 s apart. The drop comes
		// right after an output, a second before the next one, and the
		// outage lasts past that next one, so that it is buffered.
		const n = 6
		id := send(t, k, fmt.Sprintf("import time\nfor i in range(%d):\n    print(i, flush=True)\n    time.sleep(1)", n))
		rec.WaitFor(t, execTimeout, id, "first output", func(ms []*jupyter.Message) bool { return strings.Contains(kerneltest.StreamText(ms, "stdout"), "0\n") })
		if !k.DropConnection(1500 * time.Millisecond) {
			t.Fatal("no channels socket to drop")
		}
		ms := rec.WaitFor(t, execTimeout, id, "reply and idle", kerneltest.Complete)
		var wantOut strings.Builder
		for i := range n {
			fmt.Fprintf(&wantOut, "%d\n", i)
		}
		if got := kerneltest.StreamText(ms, "stdout"); got != wantOut.String() {
			t.Errorf("stdout = %q, want %q", got, wantOut.String())
		}
		checkShape(t, id, ms, "ok")
		// The server took the socket for the same session and replayed.
		log := s.Output()
		if !strings.Contains(log, "Restoring connection for "+k.ID()+":"+k.Session()) ||
			!strings.Contains(log, "Replaying") {
			t.Errorf("the server did not restore the session and replay: %s", remotetest.LastLines(log, 10))
		}
		if got := k.Subprotocol(); got != want {
			t.Errorf("Subprotocol() after reconnect = %q, want %q", got, want)
		}
		// A request sent while the socket is down waits for the next one.
		k.DropConnection(200 * time.Millisecond)
		if got := stdout(execute(t, k, rec, "print(i)")); got != fmt.Sprintf("%d\n", n-1) {
			t.Errorf("print(i) = %q", got)
		}
		st := k.Stats()
		if st.Reconnects != 2 || st.Malformed != 0 {
			t.Errorf("Stats() = %+v, want two reconnects", st)
		}
		t.Logf("stats %+v", st)
	})
}

// A kernel deleted behind aiod's back (as culling does) ends the Kernel
// with an error that says so.
func TestDeletedBehindBack(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	k, rec := startKernel(t, s, func(o *Options) { o.CheckInterval = 300 * time.Millisecond })
	execute(t, k, rec, "pass")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client(t, s).DeleteKernel(ctx, k.ID()); err != nil {
		t.Fatal(err)
	}
	err := waitDone(t, k, 30*time.Second)
	if !errors.Is(err, ErrGone) {
		t.Fatalf("Err() = %v, want ErrGone", err)
	}
	want := fmt.Sprintf("remote kernel %s is gone from %s (culled or deleted)", k.ID(), s.URL)
	if err.Error() != want {
		t.Errorf("Err() = %q, want %q", err, want)
	}
	err = k.Execute(ctx, jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: "pass"})
	if !errors.Is(err, ErrGone) {
		t.Errorf("Execute after the end = %v, want ErrGone", err)
	}
	if err := k.Interrupt(ctx); !errors.Is(err, ErrGone) {
		t.Errorf("Interrupt after the end = %v, want ErrGone", err)
	}
	if err := k.Close(ctx); err != nil {
		t.Errorf("Close after the end = %v", err)
	}
}

// The same, noticed by the channels socket: with no model checks, the
// server closing the socket and refusing it with 404 ends the kernel.
func TestDeletedNoticedBySocket(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	k, _ := startKernel(t, s, func(o *Options) { o.CheckInterval = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client(t, s).DeleteKernel(ctx, k.ID()); err != nil {
		t.Fatal(err)
	}
	k.DropConnection(0) // the server may keep a socket to a deleted kernel open
	err := waitDone(t, k, 30*time.Second)
	if !errors.Is(err, ErrGone) {
		t.Fatalf("Err() = %v, want ErrGone", err)
	}
}

// A server that dies ends the kernel with an error naming the endpoint.
func TestServerKilled(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	k, rec := startKernel(t, s, func(o *Options) {
		o.ReconnectTimeout = 2 * time.Second
		o.PingInterval = 500 * time.Millisecond
		o.PingTimeout = time.Second
	})
	execute(t, k, rec, "pass")
	s.Kill()
	err := waitDone(t, k, 30*time.Second)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Err() = %v, want ErrUnreachable", err)
	}
	if !strings.Contains(err.Error(), s.URL) || !strings.Contains(err.Error(), "stopped answering") {
		t.Errorf("Err() = %q, want the endpoint %s named", err, s.URL)
	}
	if strings.Contains(err.Error(), s.Token) {
		t.Errorf("Err() shows the token: %q", err)
	}
	t.Logf("Err() = %v", err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.Execute(ctx, jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: "pass"}); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Execute after the end = %v, want ErrUnreachable", err)
	}
	if err := k.Close(ctx); err != nil {
		t.Errorf("Close after the end = %v", err)
	}
}

// A server that freezes (SIGSTOP: connections accepted, nothing answered)
// is noticed by the pings; once it answers again, Close still deletes the
// kernel.
func TestServerFrozen(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	k, rec := startKernel(t, s, func(o *Options) {
		o.PingInterval = 300 * time.Millisecond
		o.PingTimeout = 500 * time.Millisecond
		o.ReconnectTimeout = 1500 * time.Millisecond
		o.CheckInterval = time.Hour
	})
	execute(t, k, rec, "pass")
	pid := s.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	err := waitDone(t, k, 30*time.Second)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), s.URL) {
		t.Fatalf("Err() = %v, want ErrUnreachable naming %s", err, s.URL)
	}
	t.Logf("Err() = %v", err)
	thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Close(ctx); err != nil {
		t.Errorf("Close = %v", err)
	}
	if _, err := client(t, s).Kernel(ctx, k.ID()); !errors.Is(err, ErrGone) {
		t.Errorf("the kernel survived Close on the thawed server: %v", err)
	}
}

// A kernel restarted on the server while aiod's channels socket was down
// (through the REST API, as another client or a crash in the outage
// would): no "restarting" status reaches aiod, and the socket reopens on
// the same kernel id with its state gone. The next reply is signed by
// another process: the Kernel ends with ErrGone saying so, instead of
// running the call in an empty kernel.
func TestRestartedWhileAway(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	k, rec := startKernel(t, s, nil)
	execute(t, k, rec, "x = 1")
	if !k.DropConnection(time.Hour) {
		t.Fatal("no channels socket to drop")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := client(t, s).restartKernel(ctx, k.ID()); err != nil {
		t.Fatal(err)
	}
	k.EndOutage()
	send(t, k, "print(x)")
	err := waitDone(t, k, 60*time.Second)
	if !errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("Err() = %v, want ErrGone saying the kernel's process was replaced", err)
	}
	t.Logf("Err() = %v", err)
}

// A kernel process that dies is restarted by Jupyter Server with its state
// lost; the Kernel ends, says so, and deletes the restarted kernel.
func TestKernelCrash(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	k, rec := startKernel(t, s, nil)
	execute(t, k, rec, "x = 1")
	send(t, k, "import os; os._exit(1)")
	err := waitDone(t, k, 60*time.Second)
	if !errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "restarted") {
		t.Fatalf("Err() = %v, want ErrGone saying the server restarted it", err)
	}
	t.Logf("Err() = %v", err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client(t, s).Kernel(ctx, k.ID()); !errors.Is(err, ErrGone) {
		t.Errorf("the restarted kernel was not deleted: %v", err)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	k, rec := startKernel(t, s, nil)
	execute(t, k, rec, "pass")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Done():
	default:
		t.Fatal("Done still open after Close")
	}
	if err := k.Err(); !errors.Is(err, ErrClosed) {
		t.Errorf("Err() = %v, want ErrClosed", err)
	}
	if _, err := client(t, s).Kernel(ctx, k.ID()); !errors.Is(err, ErrGone) {
		t.Errorf("GET of the closed kernel: %v, want gone", err)
	}
	if err := k.Close(ctx); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := k.Execute(ctx, jupyter.ExecuteRequest{MsgID: jupyter.NewID(), Code: "pass"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Execute after Close = %v, want ErrClosed", err)
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	_, err := Start(ctx, Options{Client: client(t, s), KernelName: "no-such-kernel"})
	if err == nil || !strings.Contains(err.Error(), "no-such-kernel") || !strings.Contains(err.Error(), s.URL) {
		t.Errorf("unknown kernelspec: %v", err)
	}
	t.Logf("unknown kernelspec: %v", err)

	bad, _ := NewClient(s.URL, "wrong-token")
	t.Cleanup(bad.CloseIdleConnections)
	_, err = Start(ctx, Options{Client: bad})
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("wrong token: %v", err)
	}
	t.Logf("wrong token: %v", err)

	// Nothing left running on the server.
	ks, err := client(t, s).Kernels(ctx)
	if err != nil || len(ks) != 0 {
		t.Errorf("kernels left: %v, %v", ks, err)
	}

	_, err = Start(ctx, Options{})
	if err == nil {
		t.Error("Start without a client succeeded")
	}
}

func TestConcurrentStarts(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	c := client(t, s)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
			defer cancel()
			rec := newRecorder()
			k, err := Start(ctx, Options{Client: c, Handler: rec.Handle})
			if err != nil {
				errs <- err
				return
			}
			defer k.Close(ctx)
			id := jupyter.NewID()
			if err := k.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: "print(6*7)"}); err != nil {
				errs <- err
				return
			}
			if !rec.WaitUntil(execTimeout, func() bool { return kerneltest.Complete(rec.Children(id)) }) {
				errs <- fmt.Errorf("no reply and idle within %s: %s", execTimeout, kerneltest.Summary(rec.Children(id)))
				return
			}
			if got := kerneltest.StreamText(rec.Children(id), "stdout"); got != "42\n" {
				errs <- fmt.Errorf("stdout %q", got)
				return
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
