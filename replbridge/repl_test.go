package replbridge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
)

var langs = []string{LangPython, LangJavaScript}

// code holds one snippet per language.
type code map[string]string

func forEachLang(t *testing.T, f func(t *testing.T, h *harness)) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			f(t, start(t, lang))
		})
	}
}

func TestStatePersists(t *testing.T) {
	setup := code{
		LangPython:     "x = 41\ndef f():\n    return 1",
		LangJavaScript: "globalThis.n = 41; var v = 1; let l = 1; const c = 1; function f() { return 1 }",
	}
	check := code{
		LangPython:     "print(x + f())",
		LangJavaScript: "console.log(n + 1); console.log(v + l + c + f() + 38)",
	}
	want := code{LangPython: "42\n", LangJavaScript: "42\n42\n"}
	forEachLang(t, func(t *testing.T, h *harness) {
		h.ok(setup[h.lang])
		if got := h.ok(check[h.lang]).stdout; got != want[h.lang] {
			t.Errorf("stdout = %q, want %q", got, want[h.lang])
		}
	})
}

func TestMessageShape(t *testing.T) {
	forEachLang(t, func(t *testing.T, h *harness) {
		h.ok("1")
		id := h.send("2")
		res := h.await(id, waitLimit)
		var types []string
		seen := map[string]bool{}
		for _, m := range res.msgs {
			types = append(types, m.Channel+"/"+m.Header.MsgType)
			hd := m.Header
			if hd.Session != h.r.session || hd.Version != "5.3" || seen[hd.MsgID] || hd.MsgID == "" {
				t.Errorf("bad header %+v", hd)
			}
			seen[hd.MsgID] = true
			if _, err := time.Parse(time.RFC3339, hd.Date); err != nil || !strings.HasSuffix(hd.Date, "Z") {
				t.Errorf("date %q: not RFC3339 UTC (%v)", hd.Date, err)
			}
		}
		want := "iopub/status iopub/execute_input iopub/execute_result iopub/status shell/execute_reply"
		if got := strings.Join(types, " "); got != want {
			t.Errorf("messages = %s, want %s", got, want)
		}
		if res.value != "2" || res.reply["status"] != "ok" || res.reply["execution_count"] != float64(2) {
			t.Errorf("value %q reply %v", res.value, res.reply)
		}
		if !strings.Contains(string(res.msgs[1].Content), `"execution_count":2`) {
			t.Errorf("execute_input = %s", res.msgs[1].Content)
		}
	})
}

func TestStreamsInOrder(t *testing.T) {
	src := code{
		LangPython:     "import sys\nprint('a')\nprint('e1', file=sys.stderr)\nprint('b')\nsys.stderr.write('e2\\n')\nprint('c')",
		LangJavaScript: "console.log('a'); console.error('e1'); console.log('b'); process.stderr.write('e2\\n'); console.log('c')",
	}
	forEachLang(t, func(t *testing.T, h *harness) {
		res := h.ok(src[h.lang])
		if res.stdout != "a\nb\nc\n" || res.stderr != "e1\ne2\n" {
			t.Errorf("stdout %q stderr %q", res.stdout, res.stderr)
		}
		if res.hasValue {
			t.Errorf("unexpected execute_result %q", res.value)
		}
	})
}

func TestTrailingValue(t *testing.T) {
	cases := map[string][][2]string{ // code, text/plain ("" = none)
		LangPython:     {{"1 + 1", "2"}, {"'s'", "'s'"}, {"None", ""}, {"x = 3", ""}, {"y = 4\ny * 2", "8"}, {"[1, 'a']", "[1, 'a']"}},
		LangJavaScript: {{"1 + 1", "2"}, {"'s'", "'s'"}, {"undefined", ""}, {"let z = 3", ""}, {"({a: 1})", "{ a: 1 }"}, {"{a: 1}", "{ a: 1 }"}, {"[1, 'a']", "[ 1, 'a' ]"}, {"new Promise(() => {})", "Promise { <pending> }"}},
	}
	forEachLang(t, func(t *testing.T, h *harness) {
		for _, c := range cases[h.lang] {
			res := h.ok(c[0])
			if res.value != c[1] || res.hasValue != (c[1] != "") {
				t.Errorf("%q: value %q (present %v), want %q", c[0], res.value, res.hasValue, c[1])
			}
		}
	})
}

func TestErrors(t *testing.T) {
	type want struct{ code, ename, evalue, inTB string }
	cases := map[string][]want{
		LangPython: {
			{"def g():\n    return 1/0\ng()", "ZeroDivisionError", "division by zero", "return 1/0"},
			{"def (:", "SyntaxError", "invalid syntax (<cell-2>, line 1)", "SyntaxError"},
			{"raise SystemExit(3)", "SystemExit", "3", "SystemExit"},
			{"input()", "EOFError", "EOF when reading a line", "EOFError"},
		},
		LangJavaScript: {
			{"function g() { throw new TypeError('bad') }\ng()", "TypeError", "bad", "at g"},
			{"let = ;", "SyntaxError", "Unexpected token ';'", "SyntaxError"},
			{"await Promise.reject(new RangeError('later'))", "RangeError", "later", "RangeError: later"},
			{"await (", "SyntaxError", "Unexpected end of input", "SyntaxError"},
			{"throw 5", "Error", "5", "5"},
		},
	}
	forEachLang(t, func(t *testing.T, h *harness) {
		for _, c := range cases[h.lang] {
			res := h.run(c.code)
			if res.err == nil {
				t.Errorf("%q: no error message", c.code)
				continue
			}
			tb := strings.Join(res.err.Traceback, "\n")
			if res.err.Ename != c.ename || res.err.Evalue != c.evalue || !strings.Contains(tb, c.inTB) {
				t.Errorf("%q: error %s: %q, traceback:\n%s", c.code, res.err.Ename, res.err.Evalue, tb)
			}
			if strings.Contains(tb, "<string>") || strings.Contains(tb, "[eval]") || strings.Contains(tb, "node:internal") {
				t.Errorf("%q: driver frames in traceback:\n%s", c.code, tb)
			}
			if res.reply["status"] != "error" || res.reply["ename"] != c.ename {
				t.Errorf("%q: reply %v", c.code, res.reply)
			}
		}
		if res := h.ok("1"); res.value != "1" {
			t.Errorf("after errors: value %q", res.value)
		}
	})
}

func TestInterrupt(t *testing.T) {
	// Each says "begun" right before the loop or the wait the interrupt
	// must stop; the async JavaScript cell once it has been handed to the
	// driver's await.
	loop := code{LangPython: "x = 5\nprint('begun', flush=True)\nwhile True: pass", LangJavaScript: "var x = 5; console.log('begun'); while (true) {}"}
	asyncLoop := code{LangPython: "import time\nprint('begun', flush=True)\ntime.sleep(60)", LangJavaScript: "await null; console.log('begun'); await new Promise(r => setTimeout(r, 60000))"}
	ename := code{LangPython: "KeyboardInterrupt", LangJavaScript: "Interrupted"}
	forEachLang(t, func(t *testing.T, h *harness) {
		for _, src := range []string{loop[h.lang], asyncLoop[h.lang]} {
			id := h.send(src)
			h.rec.WaitFor(t, 10*time.Second, id, "begun on stdout", func(ms []*jupyter.Message) bool {
				return kerneltest.StreamText(ms, "stdout") != ""
			})
			sent := time.Now()
			if err := h.r.Interrupt(context.Background()); err != nil {
				t.Fatalf("interrupt: %v", err)
			}
			// The cell must end by the interrupt, well before its own minute
			// would (how fast is measured, not asserted: a loaded machine
			// took 4.5 s for the synchronous loop).
			res := h.await(id, 45*time.Second)
			t.Logf("%q: idle %s after interrupt", src, time.Since(sent))
			if res.err == nil || res.err.Ename != ename[h.lang] {
				t.Errorf("%q: error %+v", src, res.err)
			}
		}
		if got := h.ok("x + 1").value; got != "6" {
			t.Errorf("state after interrupt: x + 1 = %q", got)
		}
		if err := h.r.Interrupt(context.Background()); err != nil { // while idle: harmless
			t.Fatalf("interrupt idle: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // time for a stray SIGINT to land and break the next call: it must not
		h.ok("1")
	})
}

func TestPythonMainModule(t *testing.T) {
	h := start(t, LangPython)
	h.ok("import pickle\nclass P:\n    v = 3\nimport __main__")
	if res := h.ok("__name__, __main__.P.v, pickle.loads(pickle.dumps(P())).v"); res.value != "('__main__', 3, 3)" {
		t.Errorf("value %q", res.value)
	}
}

func TestTopLevelAwait(t *testing.T) {
	h := start(t, LangJavaScript)
	if res := h.ok("await new Promise(r=>setTimeout(r,50)); console.log('x')"); res.stdout != "x\n" {
		t.Errorf("stdout %q", res.stdout)
	}
	if res := h.ok("const v = await Promise.resolve(7); v * 2"); res.value != "14" {
		t.Errorf("value %q, want 14", res.value)
	}
	if res := h.ok("v"); res.value != "7" {
		t.Errorf("v after await cell = %q, want 7", res.value)
	}
}

func TestUnhandledRejectionSurvives(t *testing.T) {
	h := start(t, LangJavaScript)
	id := h.send("Promise.reject(new Error('boom')); setTimeout(() => { throw new Error('late') }, 10); 1")
	h.await(id, waitLimit)
	ok := h.rec.WaitUntil(10*time.Second, func() bool {
		res := &result{msgs: h.rec.Stamped(id)}
		res.fold()
		return strings.Contains(res.stderr, "boom") && strings.Contains(res.stderr, "late")
	})
	if !ok {
		t.Errorf("no report of the rejection: %s", dump(h.rec.Stamped(id)))
	}
	if got := h.ok("2").value; got != "2" {
		t.Errorf("after rejection: %q", got)
	}
}

func TestChildProcessOutput(t *testing.T) {
	src := code{
		LangPython:     "import os, subprocess\n_ = os.system('echo hi; test -e /proc/self/fd/4 && echo fd4 leaked')\n_ = subprocess.run(['sh', '-c', 'echo err >&2'])",
		LangJavaScript: "require('child_process').execSync('echo hi; echo err >&2', {stdio: 'inherit'}); undefined",
	}
	forEachLang(t, func(t *testing.T, h *harness) {
		res := h.ok(src[h.lang])
		if res.stdout != "hi\n" || res.stderr != "err\n" {
			t.Errorf("stdout %q stderr %q", res.stdout, res.stderr)
		}
	})
}

func TestHugeOutput(t *testing.T) {
	const n = 5 << 20
	src := code{
		LangPython:     "print('x' * (5 << 20), end='')\nimport sys\nprint('tail', file=sys.stderr)",
		LangJavaScript: "process.stdout.write('x'.repeat(5 << 20)); console.error('tail')",
	}
	forEachLang(t, func(t *testing.T, h *harness) {
		res := h.ok(src[h.lang])
		if len(res.stdout) != n || strings.Trim(res.stdout, "x") != "" || res.stderr != "tail\n" {
			t.Errorf("stdout %d bytes (want %d), stderr %q", len(res.stdout), n, res.stderr)
		}
		if got := h.ok("1").value; got != "1" {
			t.Errorf("after huge output: %q", got)
		}
	})
}

func TestHugeCode(t *testing.T) {
	forEachLang(t, func(t *testing.T, h *harness) {
		src := "'" + strings.Repeat("y", 1<<20) + "'.length"
		if h.lang == LangPython {
			src = "len('" + strings.Repeat("y", 1<<20) + "')"
		}
		if res := h.ok(src); res.value != "1048576" {
			t.Errorf("value %q", res.value)
		}
	})
}

func TestSilent(t *testing.T) {
	forEachLang(t, func(t *testing.T, h *harness) {
		h.ok("1")
		if err := h.r.Execute(context.Background(), jupyter.ExecuteRequest{MsgID: "quiet", Code: "2", Silent: true}); err != nil {
			t.Fatal(err)
		}
		res := h.await("quiet", waitLimit)
		for _, m := range res.msgs {
			if m.Header.MsgType == "execute_input" || m.Header.MsgType == "execute_result" {
				t.Errorf("silent execution sent %s", m.Header.MsgType)
			}
		}
		if res.reply["execution_count"] != float64(1) {
			t.Errorf("silent reply %v", res.reply)
		}
		if err := h.r.Execute(context.Background(), jupyter.ExecuteRequest{Code: "1"}); err == nil {
			t.Errorf("execute without MsgID succeeded")
		}
	})
}

func TestPartialAndBinaryOutput(t *testing.T) {
	partial := code{LangPython: "print('abc', end='')", LangJavaScript: "process.stdout.write('abc')"}
	junk := code{
		LangPython:     "import sys\nsys.stdout.buffer.write(b'\\xff\\x00aiod:end:zz\\x00\\xe2\\x82')\nsys.stdout.buffer.write(b'\\xac!')\nsys.stdout.flush()",
		LangJavaScript: "process.stdout.write(Buffer.from([0xff, 0, 0x61, 0x69, 0x6f, 0x64, 0x3a, 0xe2, 0x82])); process.stdout.write(Buffer.from([0xac, 0x21])); undefined",
	}
	forEachLang(t, func(t *testing.T, h *harness) {
		if res := h.ok(partial[h.lang]); res.stdout != "abc" {
			t.Errorf("stdout %q, want abc", res.stdout)
		}
		res := h.ok(junk[h.lang])
		if !utf8.ValidString(res.stdout) || !strings.HasSuffix(res.stdout, "€!") || !strings.HasPrefix(res.stdout, "\uFFFD\x00aiod:") {
			t.Errorf("junk stdout %q", res.stdout)
		}
		if got := h.ok("1").value; got != "1" {
			t.Errorf("after junk: %q", got)
		}
	})
}

// TestLiveOutput proves that output streams while the code runs, by cause:
// the code prints a line, then waits for a file that the test makes only
// once that line's stream message has arrived. A bridge that held output
// back until the code ended would never deliver it, and the code would
// give up after 60 s and say so.
func TestLiveOutput(t *testing.T) {
	src := code{
		LangPython: "import os, time\nprint(0)\nfor _ in range(600):\n    if os.path.exists(%q): break\n    time.sleep(0.1)\n" +
			"else:\n    print('no gate')\nprint(1)",
		LangJavaScript: "console.log(0); let gated = false; for (let i = 0; i < 600 && !(gated = require('fs').existsSync(%q)); i++) " +
			"await new Promise(r => setTimeout(r, 100)); if (!gated) console.log('no gate'); console.log(1)",
	}
	forEachLang(t, func(t *testing.T, h *harness) {
		gate := filepath.Join(t.TempDir(), "gate")
		id := h.send(fmt.Sprintf(src[h.lang], gate))
		first := func() bool {
			for _, m := range h.rec.Stamped(id) {
				if m.Header.MsgType == "stream" {
					return true
				}
			}
			return false
		}
		if !h.rec.WaitUntil(waitLimit, first) {
			t.Fatalf("no stream message while the code waits: %s", dump(h.rec.Stamped(id)))
		}
		if finished(h.rec.Stamped(id)) {
			t.Fatalf("the code ended before its gate was made: %s", dump(h.rec.Stamped(id)))
		}
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		res := h.await(id, waitLimit)
		if res.err != nil || res.stdout != "0\n1\n" {
			t.Fatalf("stdout %q, error %v", res.stdout, res.err)
		}
	})
}

func TestQueue(t *testing.T) {
	forEachLang(t, func(t *testing.T, h *harness) {
		ids := []string{h.send("a = 1"), h.send("a + 1"), h.send("a + 2")}
		for i, id := range ids {
			res := h.await(id, waitLimit)
			if i > 0 && res.value != string(rune('1'+i)) {
				t.Errorf("%s: value %q", id, res.value)
			}
		}
		first, last := h.rec.Stamped(ids[0]), h.rec.Stamped(ids[2])
		if !first[len(first)-1].At.Before(last[0].At) && first[len(first)-1].At != last[0].At {
			t.Errorf("executions overlap")
		}
	})
}

func TestDeath(t *testing.T) {
	exit := code{LangPython: "import os\nos._exit(3)", LangJavaScript: "process.exit(3)"}
	forEachLang(t, func(t *testing.T, h *harness) {
		h.send(exit[h.lang])
		waitDone(t, h.r)
		want := h.lang + " REPL died: exited with code 3"
		if err := h.r.Err(); err == nil || err.Error() != want {
			t.Errorf("Err = %v, want %q", err, want)
		}
		if err := h.r.Execute(context.Background(), jupyter.ExecuteRequest{MsgID: "late", Code: "1"}); err == nil {
			t.Errorf("execute on a dead REPL succeeded")
		}
	})
	forEachLang(t, func(t *testing.T, h *harness) {
		h.send(code{LangPython: "while True: pass", LangJavaScript: "while (true) {}"}[h.lang])
		syscall.Kill(h.r.Info().PID, syscall.SIGKILL)
		waitDone(t, h.r)
		if err := h.r.Err(); err == nil || !strings.Contains(err.Error(), "died: killed by signal SIGKILL") {
			t.Errorf("Err = %v", err)
		}
	})
}

func waitDone(t *testing.T, r *REPL) {
	t.Helper()
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("Done not closed 10 s after the process died")
	}
}

func TestCloseKillsEverything(t *testing.T) {
	bg := code{
		LangPython:     "import subprocess\np = subprocess.Popen(['sleep', '60'])",
		LangJavaScript: "require('child_process').spawn('sleep', ['60'], {stdio: 'inherit'}); undefined",
	}
	forEachLang(t, func(t *testing.T, h *harness) {
		h.ok(bg[h.lang])
		h.send(code{LangPython: "while True: pass", LangJavaScript: "while (true) {}"}[h.lang]) // busy while closing
		h.close()                                                                               // also checks the group is gone
		waitDone(t, h.r)
		if !errors.Is(h.r.Err(), ErrClosed) {
			t.Errorf("Err after Close = %v", h.r.Err())
		}
		if err := h.r.Close(context.Background()); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := h.r.Interrupt(context.Background()); err == nil {
			t.Errorf("interrupt after Close succeeded")
		}
	})
}

func TestInfo(t *testing.T) {
	forEachLang(t, func(t *testing.T, h *harness) {
		info := h.r.Info()
		if info.Backend != "native" || info.Language != h.lang || info.PID <= 0 || info.Version == "" || info.Name == "" {
			t.Errorf("info %+v", info)
		}
		if h.lang == LangPython && info.Name != "/usr/bin/python3" {
			t.Errorf("python interpreter %q, want /usr/bin/python3", info.Name)
		}
	})
}

func TestEnvAndCwd(t *testing.T) {
	dir := t.TempDir()
	rec := newRecorder()
	r, err := Start(context.Background(), Options{Language: LangPython, Handler: rec.Handle, Cwd: dir, Env: []string{"AIOD_T=yes"}, StartTimeout: waitLimit})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, r: r, rec: rec, lang: LangPython}
	t.Cleanup(h.close)
	if res := h.ok("import os\nprint(os.getcwd(), os.environ['AIOD_T'])"); res.stdout != dir+" yes\n" {
		t.Errorf("stdout %q", res.stdout)
	}
}

func TestStartErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, Options{Language: "ruby"}); err == nil || !strings.Contains(err.Error(), `"ruby"`) {
		t.Errorf("ruby: %v", err)
	}
	_, err := Start(ctx, Options{Language: LangPython, Interpreter: "/nonexistent/python3"})
	if !errors.Is(err, ErrNoInterpreter) {
		t.Errorf("missing interpreter: %v", err)
	}
	// An interpreter that exits at once: the error carries its stderr.
	_, err = Start(ctx, Options{Language: LangJavaScript, Interpreter: "/usr/bin/false"})
	if err == nil || !strings.Contains(err.Error(), "exited with code 1") {
		t.Errorf("false as node: %v", err)
	}
}

func TestFind(t *testing.T) {
	path, v, err := FindNode()
	if err != nil || path == "" || !strings.HasPrefix(v, "20.") {
		t.Errorf("FindNode = %q %q %v", path, v, err)
	}
	path, v, err = FindPython()
	if err != nil || path != "/usr/bin/python3" || !strings.HasPrefix(v, "3.") {
		t.Errorf("FindPython = %q %q %v", path, v, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if v, err := NodeVersion(ctx); err != nil || v == "" {
		t.Errorf("NodeVersion = %q %v", v, err)
	}
	if v, err := NpmVersion(ctx); err != nil || v == "" {
		t.Errorf("NpmVersion = %q %v", v, err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, _, err := FindNode(); !errors.Is(err, ErrNoInterpreter) || !strings.Contains(err.Error(), "javascript needs node on PATH; none found") {
		t.Errorf("FindNode without node: %v", err)
	}
}

// A process that left the group but holds stdout must not keep Close waiting.
func TestCloseWithEscapedHolder(t *testing.T) {
	h := start(t, LangPython)
	res := h.ok("import subprocess\np = subprocess.Popen(['setsid', 'sleep', '600'])\nprint(p.pid)")
	holder, err := strconv.Atoi(strings.TrimSpace(res.stdout))
	if err != nil {
		t.Fatalf("holder pid: %q", res.stdout)
	}
	t.Cleanup(func() { _ = syscall.Kill(holder, syscall.SIGKILL) }) // it left the group Close kills
	begin := time.Now()
	h.close()
	// Far less than the holder's 600 s, and far more than a loaded
	// machine's delay: Close did not wait for the holder's end of stdout.
	if d := time.Since(begin); d > 60*time.Second {
		t.Errorf("Close took %s", d)
	}
	if !errors.Is(h.r.Err(), ErrClosed) {
		t.Errorf("Err = %v", h.r.Err())
	}
}

// TestSlowReaderKeepsTheMarkerLast: while aiod does not read a REPL's
// stdout (its handler blocked, as on a machine loaded far past its cores),
// a 5 MiB process.stdout.write fills the pipe and queues in Node; the
// cell's end marker must still come after all of it. The driver once wrote
// the marker on the descriptor after waiting a second, ahead of what the
// stream held: the execution ended short and the rest came after it.
func TestSlowReaderKeepsTheMarkerLast(t *testing.T) {
	kerneltest.SkipShort(t, "a REPL")
	rec := newRecorder()
	release, first := make(chan struct{}), sync.Once{}
	blocked := make(chan time.Time, 1)
	handle := func(m *jupyter.Message) {
		if m.Header.MsgType == "stream" && strings.Contains(string(m.Content), `"stdout"`) {
			first.Do(func() { blocked <- time.Now(); <-release })
		}
		rec.Handle(m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	r, err := Start(ctx, Options{Language: LangJavaScript, Handler: handle, StartTimeout: waitLimit})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, r: r, rec: rec, lang: LangJavaScript}
	t.Cleanup(func() { h.close() })
	go func() {
		// The driver's fallback waited one second for a stream that did not
		// drain: hold the reader for twice that.
		at := <-blocked
		time.Sleep(time.Until(at.Add(2 * time.Second)))
		close(release)
	}()
	const n = 5 << 20
	res := h.ok("process.stdout.write('x'.repeat(5 << 20)); console.error('tail')")
	if len(res.stdout) != n || strings.Trim(res.stdout, "x") != "" || res.stderr != "tail\n" {
		t.Errorf("stdout %d bytes (want %d), stderr %q", len(res.stdout), n, res.stderr)
	}
	if got := h.ok("1").value; got != "1" {
		t.Errorf("after the slow read: %q", got)
	}
}
