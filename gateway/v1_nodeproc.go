package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aiod/aiod/stream"
)

// v1NodeLoader runs the code in AIOD_CODE_FILE as a CommonJS module whose
// folder is the working directory, as `node -e` would: require('./x')
// resolves there, and fs.readFileSync(0) or process.stdin read the input.
const v1NodeLoader = `const fs = require('fs'), path = require('path'), Module = require('module');
const file = process.env.AIOD_CODE_FILE;
delete process.env.AIOD_CODE_FILE;
const code = fs.readFileSync(file, 'utf8');
const name = path.join(process.cwd(), '[eval]');
const m = new Module(name, null);
m.filename = name;
m.paths = Module._nodeModulePaths(process.cwd());
m._compile(code, name);
`

// runNodeProcess runs code in a node process of its own, in dir, with
// stdin as its standard input: the one-shot path for calls that send stdin
// (a REPL session's standard input is /dev/null). The result holds a stdout
// and a stderr stream output; exitCode is the process's, 124 on timeout.
func (v *v1) runNodeProcess(ctx context.Context, code, stdin, dir string, timeout time.Duration) (*stream.Result, int) {
	one := 1
	res := &stream.Result{ID: stream.NewID(), Code: code, Language: "javascript", ExecutionCount: &one}
	fail := func(msg string) (*stream.Result, int) {
		res.Status = stream.StatusError
		res.Notes = append(res.Notes, msg)
		return res, 1
	}
	tmp, err := os.MkdirTemp("", "aiod-code-")
	if err != nil {
		return fail("create a folder for the code: " + err.Error())
	}
	defer os.RemoveAll(tmp)
	codeFile := filepath.Join(tmp, "code.js")
	if err := os.WriteFile(codeFile, []byte(code), 0o600); err != nil {
		return fail("write the code: " + err.Error())
	}

	limit := max(v.s.cfg.OutputBudget/2, 1024)
	stdout, stderr := &v1CapBuffer{max: limit}, &v1CapBuffer{max: limit}
	cmd := exec.Command(v.s.env.Node.Path, "-e", v1NodeLoader)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AIOD_CODE_FILE="+codeFile)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return fail("start node: " + err.Error())
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var werr error
	timedOut := false
	select {
	case werr = <-waited:
	case <-timer.C:
		timedOut = true
		kill()
		werr = <-waited
	case <-ctx.Done():
		kill()
		werr = <-waited
		res.Notes = append(res.Notes, "the request ended before the code finished; the process was killed")
	}
	kill() // children the code left behind
	for _, s := range []struct {
		name string
		buf  *v1CapBuffer
	}{{"stdout", stdout}, {"stderr", stderr}} {
		if text := s.buf.String(); text != "" {
			res.Outputs = append(res.Outputs, &stream.Output{Type: "stream", Name: s.name, Text: text, Truncated: s.buf.cut > 0})
		}
		if s.buf.cut > 0 {
			res.Truncated = true
			res.Notes = append(res.Notes, fmt.Sprintf("%s was cut after %d bytes (%d bytes dropped)", s.name, s.buf.max, s.buf.cut))
		}
	}
	exit := cmd.ProcessState.ExitCode()
	switch {
	case timedOut:
		res.Status = stream.StatusTimeout
		res.Notes = append([]string{fmt.Sprintf("execution timed out after %s and the process was killed", timeout)}, res.Notes...)
		return res, 124
	case exit == 0:
		res.Status = stream.StatusOK
		return res, 0
	}
	res.Status = stream.StatusError
	var ee *exec.ExitError
	if exit < 0 && errors.As(werr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit = 128 + int(ws.Signal())
			res.Notes = append([]string{fmt.Sprintf("node was killed by signal %s", ws.Signal())}, res.Notes...)
			return res, exit
		}
	}
	if exit < 0 {
		exit = 1
	}
	res.Notes = append([]string{fmt.Sprintf("node exited with code %d", exit)}, res.Notes...)
	return res, exit
}

// v1CapBuffer keeps the first max bytes written and counts the rest.
type v1CapBuffer struct {
	max int
	b   []byte
	cut int
}

func (c *v1CapBuffer) Write(p []byte) (int, error) {
	room := c.max - len(c.b)
	switch {
	case room >= len(p):
		c.b = append(c.b, p...)
	case room > 0:
		c.b = append(c.b, p[:room]...)
		c.cut += len(p) - room
	default:
		c.cut += len(p)
	}
	return len(p), nil
}

func (c *v1CapBuffer) String() string { return string(c.b) }
