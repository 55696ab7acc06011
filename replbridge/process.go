package replbridge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/aiod/aiod/kernel/proc"
	"golang.org/x/sys/unix"
)

// nodeLoader runs the code it reads from descriptor 3 as a CommonJS module
// whose folder is the working directory, as `node -e` would: require('./x')
// resolves there, and fs.readFileSync(0) or process.stdin read the input.
// The code travels in a memory file, so it needs no folder the process can
// see (a confined one sees its tenant's view only).
const nodeLoader = `const fs = require('fs'), path = require('path'), Module = require('module');
const code = fs.readFileSync(3, 'utf8');
fs.closeSync(3);
const name = path.join(process.cwd(), '[eval]');
const m = new Module(name, null);
m.filename = name;
m.paths = Module._nodeModulePaths(process.cwd());
m._compile(code, name);
`

// NodeRun is one run of code in a node process of its own: the one-shot
// path for calls that send standard input (a REPL session's standard input
// is /dev/null).
type NodeRun struct {
	Node    string        // the node binary
	Code    string        // run as a CommonJS module whose folder is Dir
	Stdin   string        // the process's standard input
	Dir     string        // working directory; "" is aiod's
	Timeout time.Duration // the process is killed after it
	Limit   int           // bytes kept of stdout and of stderr each
	// Environ is the process's base environment; nil is aiod's own.
	Environ []string
	// Credential runs node as that user; nil is aiod's user.
	Credential *syscall.Credential
	// Wrap confines node's command (tenant isolation); nil none.
	Wrap func(*exec.Cmd)
	// Started, when set, is called with node's pid while it waits at a
	// gate before node runs (package proc), to put it under its limits.
	// An error ends it and is returned.
	Started func(pid int) error
}

// NodeOutcome is how a NodeRun ended.
type NodeOutcome struct {
	Stdout, Stderr       string
	StdoutCut, StderrCut int    // bytes dropped past Limit
	ExitCode             int    // the process's; -1 when a signal ended it
	Signal               string // the signal that killed it, if one did
	TimedOut             bool   // killed after Timeout
	Canceled             bool   // killed because ctx ended first
}

// RunNode runs r and waits for the process and for every process it left in
// its group (they are killed). The error is non-nil only when the process
// could not be started.
func RunNode(ctx context.Context, r NodeRun) (NodeOutcome, error) {
	var out NodeOutcome
	code, err := memFile("aiod-code", r.Code)
	if err != nil {
		return out, fmt.Errorf("hand over the code: %w", err)
	}
	defer code.Close()
	stdout, stderr := &capBuffer{max: r.Limit}, &capBuffer{max: r.Limit}
	cmd := exec.Command(r.Node, "-e", nodeLoader)
	cmd.Dir = r.Dir
	env := r.Environ
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append([]string(nil), env...)
	cmd.Stdin = strings.NewReader(r.Stdin)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = []*os.File{code} // descriptor 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: r.Credential}
	cmd.WaitDelay = 2 * time.Second
	if err := proc.Start(cmd, r.Wrap, r.Started); err != nil {
		return out, fmt.Errorf("start node: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	timer := time.NewTimer(r.Timeout)
	defer timer.Stop()
	var werr error
	select {
	case werr = <-waited:
	case <-timer.C:
		out.TimedOut = true
		kill()
		werr = <-waited
	case <-ctx.Done():
		out.Canceled = true
		kill()
		werr = <-waited
	}
	kill() // children the code left behind
	out.Stdout, out.StdoutCut = stdout.String(), stdout.cut
	out.Stderr, out.StderrCut = stderr.String(), stderr.cut
	out.ExitCode = cmd.ProcessState.ExitCode()
	var ee *exec.ExitError
	if out.ExitCode < 0 && errors.As(werr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			out.Signal = ws.Signal().String()
			out.ExitCode = 128 + int(ws.Signal())
		}
	}
	return out, nil
}

// memFile is a memory file holding text, read from its start.
func memFile(name, text string) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// capBuffer keeps the first max bytes written and counts the rest.
type capBuffer struct {
	max int
	b   []byte
	cut int
}

func (c *capBuffer) Write(p []byte) (int, error) {
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

func (c *capBuffer) String() string { return string(c.b) }
