package replbridge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// exit is the exit_code of a bash execution's reply (-1 when missing).
func (res *result) exit() int {
	if v, ok := res.reply["exit_code"].(float64); ok {
		return int(v)
	}
	return -1
}

func TestBashState(t *testing.T) {
	h := start(t, LangBash)
	dir := t.TempDir()
	res := h.run("cd " + dir + "\nexport GREETING=hi; count=2\ntwice() { echo \"$1$1\"; }\ndeclare -A m=([k]=v)\necho ready")
	if res.stdout != "ready\n" || res.exit() != 0 || res.reply["status"] != "ok" {
		t.Fatalf("first: stdout %q exit %d reply %v", res.stdout, res.exit(), res.reply)
	}
	res = h.run(`pwd; echo "$GREETING $count ${m[k]}"; twice ab; bash -c 'echo child $GREETING'`)
	want := dir + "\nhi 2 v\nabab\nchild hi\n"
	if res.stdout != want {
		t.Errorf("state: stdout %q, want %q (stderr %q)", res.stdout, want, res.stderr)
	}
}

func TestBashExitCodesAndStderr(t *testing.T) {
	h := start(t, LangBash)
	res := h.run("echo out; echo err >&2; ls /nonexistent-aiod")
	if res.stdout != "out\n" || !strings.HasPrefix(res.stderr, "err\n") || !strings.Contains(res.stderr, "nonexistent-aiod") {
		t.Errorf("streams: stdout %q stderr %q", res.stdout, res.stderr)
	}
	if res.exit() != 2 || res.reply["status"] != "error" || res.err != nil {
		t.Errorf("ls of a missing file: exit %d reply %v error output %+v", res.exit(), res.reply, res.err)
	}
	if res = h.run("false; true"); res.exit() != 0 || res.reply["status"] != "ok" {
		t.Errorf("false; true: exit %d", res.exit())
	}
	if res = h.run("(exit 7)"); res.exit() != 7 {
		t.Errorf("(exit 7): exit %d", res.exit())
	}
	if res = h.run(""); res.exit() != 0 {
		t.Errorf("empty code: exit %d", res.exit())
	}
	// Quotes, a NUL, history characters and a here-document pass as written.
	res = h.run("echo 'a\"b' \"!x\" \x00 $((1+2))\ncat <<'END'\n$HOME stays\nEND")
	if res.stdout != "a\"b !x 3\n$HOME stays\n" {
		t.Errorf("quoting: %q (stderr %q)", res.stdout, res.stderr)
	}
}

func TestBashInterrupt(t *testing.T) {
	h := start(t, LangBash)
	// Each says "begun" once it is in what the interrupt must stop; where
	// bash runs a job, the interrupt also waits for bash to be waiting for
	// it (in wait4): a SIGINT bash gets while it forks or between two
	// commands of a line can be lost by bash, as at a terminal, which is
	// why a session's interrupt is repeated until the code stops.
	for _, c := range []struct {
		src string
		job bool
	}{
		{"sh -c 'echo begun; exec sleep 100'; echo not-reached", true},
		{"f() { sh -c 'echo begun; exec sleep 100'; echo not-reached; }; f; echo not-reached", true},
		{"n=0; while true; do n=$((n+1)); [ $n = 1 ] && echo begun; done; echo not-reached", false},
		{"sh -c 'echo begun; exec sleep 100' | cat; echo not-reached", true},
	} {
		src := c.src
		id := h.send(src)
		h.rec.WaitFor(t, 10*time.Second, id, "begun on stdout", func(ms []*jupyter.Message) bool {
			return kerneltest.StreamText(ms, "stdout") != ""
		})
		for deadline := time.Now().Add(10 * time.Second); c.job && !waitingForChild(h.r.Info().PID); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%q: bash is not waiting for its job", src)
			}
		}
		if err := h.r.Interrupt(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Nothing here ends on its own within the wait (the jobs sleep
		// 100 s, the loop never ends): an answer at all is the interrupt's.
		res := h.await(id, 60*time.Second)
		if res.stdout != "begun\n" || res.exit() != 130 {
			t.Errorf("%q: stdout %q exit %d", src, res.stdout, res.exit())
		}
	}
	if res := h.run("echo $((n > 0))"); res.stdout != "1\n" {
		t.Errorf("state after interrupts: %q", res.stdout)
	}
}

func TestBashInput(t *testing.T) {
	h := start(t, LangBash)
	if err := h.r.WriteInput(context.Background(), "echo injected\n"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("input between commands: %v", err)
	}
	// Input written at once after the command reaches the command, never
	// bash, which reads its command line from the same pipe (buffered: it
	// could take the input with it).
	for i := range 50 {
		id := h.send("read -r name; echo \"hello $name\"")
		if err := h.r.WriteInput(context.Background(), fmt.Sprintf("world %d\n", i)); err != nil {
			t.Fatal(err)
		}
		if res := h.await(id, 10*time.Second); res.stdout != fmt.Sprintf("hello world %d\n", i) {
			t.Fatalf("read %d: %q (stderr %q)", i, res.stdout, res.stderr)
		}
	}
	if res := h.run("echo next"); res.stdout != "next\n" {
		t.Errorf("after input: %q", res.stdout)
	}
}

func TestBashExitEndsREPL(t *testing.T) {
	h := start(t, LangBash)
	h.send("exit 3")
	select {
	case <-h.r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("bash did not exit")
	}
	if err := h.r.Err(); err == nil || !strings.Contains(err.Error(), "3") {
		t.Errorf("err %v", err)
	}
}

func TestBashEnvAndCwd(t *testing.T) {
	kerneltest.SkipShort(t, "a REPL")
	dir := t.TempDir()
	rec := newRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	r, err := Start(ctx, Options{Language: LangBash, Handler: rec.Handle, Cwd: dir, Env: []string{"AIOD_T=42"},
		Environ: append(os.Environ(), "PAGER=less")})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, r: r, rec: rec, lang: LangBash}
	t.Cleanup(h.close)
	if res := h.run("pwd; echo $AIOD_T $PAGER $GIT_PAGER"); res.stdout != dir+"\n42 less cat\n" {
		t.Errorf("got %q", res.stdout)
	}
}

// The code may move its own stdout and stderr; the REPL's end markers
// still reach aiod.
func TestBashRedirectsItsStreams(t *testing.T) {
	h := start(t, LangBash)
	if res := h.run("exec 2>&1; echo to-out; echo to-err >&2"); res.stdout != "to-out\nto-err\n" || res.exit() != 0 {
		t.Fatalf("exec 2>&1: stdout %q stderr %q", res.stdout, res.stderr)
	}
	if res := h.run("exec >/dev/null; echo hidden"); res.stdout != "" || res.exit() != 0 {
		t.Fatalf("exec >/dev/null: %q", res.stdout)
	}
}

// waitingForChild says whether process pid sleeps in wait4 (the kernel
// function it waits in is do_wait).
func waitingForChild(pid int) bool {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/wchan")
	return string(b) == "do_wait"
}
