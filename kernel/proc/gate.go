// Package proc starts and watches the processes of runtimes.
//
// A process starts held at a gate: it waits before its first instruction of
// its own until its starter lets it go; in between, the starter puts it in
// its cgroups or sets its rlimits, so that limits hold from the program's
// first instruction (a NODE_OPTIONS preload, a startup file, a profile)
// and nothing it starts can be outside them. The process starts as /bin/sh
// reading one line from a pipe (the gate) and then exec'ing the program in
// its place, so the process keeps its pid, process group, session and
// descriptors. A gate closed without a line makes it exit with ExitShut
// before the program runs.
//
// A process is watched through a pidfd (Pidfd, WaitPidfd) and signalled
// with its process group (SignalGroup).
package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Shell runs the gate. dash (Debian's /bin/sh) reads the line and execs in
// well under a millisecond.
const Shell = "/bin/sh"

// ExitShut is the exit code of a process whose gate was shut.
const ExitShut = 125

// Gate is one held process's: Open lets it go, Shut ends it.
type Gate struct {
	r, w *os.File
}

// Hold rewrites cmd so that, once started, it waits at a gate: call it after
// cmd's program, arguments and ExtraFiles are set and before a wrapper
// (which then runs in front of the gate) and cmd.Start; call Started after
// cmd.Start, then Open or Shut. The program gets argv[0] as its path (what
// exec.Command resolved), not the name it was given. The gate's descriptor
// comes after cmd's ExtraFiles and is closed before the program runs.
func Hold(cmd *exec.Cmd) (*Gate, error) {
	fd := 3 + len(cmd.ExtraFiles)
	if fd > 9 { // dash reads single-digit descriptors only
		return nil, fmt.Errorf("hold the process at a gate: %d descriptors passed, at most 6", len(cmd.ExtraFiles))
	}
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("hold the process at a gate: %w", err)
	}
	n := strconv.Itoa(fd)
	script := "read -r _ <&" + n + " || exit " + strconv.Itoa(ExitShut) + "; exec " + n + "<&-; exec \"$@\""
	args := append([]string{"aiod-gate", "-c", script, "aiod-gate", cmd.Path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = Shell, args
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	return &Gate{r: r, w: w}, nil
}

// Started closes the parent's copy of the gate's read end; call it once
// cmd.Start returned, whatever it returned.
func (g *Gate) Started() {
	if g != nil && g.r != nil {
		g.r.Close()
		g.r = nil
	}
}

// Open lets the process go on to its program.
func (g *Gate) Open() error {
	if g == nil {
		return nil
	}
	g.Started()
	if g.w == nil {
		return errors.New("the gate was already opened or shut")
	}
	_, err := g.w.Write([]byte("\n"))
	g.w.Close()
	g.w = nil
	if err != nil {
		return fmt.Errorf("open the process's gate: %w", err)
	}
	return nil
}

// Shut makes the process exit with ExitShut without running its program.
// It does nothing after Open.
func (g *Gate) Shut() {
	if g == nil {
		return
	}
	g.Started()
	if g.w != nil {
		g.w.Close()
		g.w = nil
	}
}

// PipeFor is a gate for a process started some other way (a fork from a
// template), when admit is set (else nil, nil): the process reads one line
// from r before it runs anything of its own, and exits when r ends without
// one. The caller hands r over and closes its copy; g holds the write end.
func PipeFor(admit func(pid int) error) (r *os.File, g *Gate, err error) {
	if admit == nil {
		return nil, nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("make a gate: %w", err)
	}
	return r, &Gate{w: w}, nil
}

// Start starts cmd through wrap (nil: none) held at a gate, calls admit with
// its pid and lets it go. Without admit it is cmd.Start after wrap. When
// admit fails, the process is killed with its process group (cmd should
// have one of its own: Setpgid or Setsid) and reaped, and the error is
// admit's. Unless cmd names its own, the process gets SIGKILL as its
// parent-death signal: a runtime dies with aiod, even while it runs user
// code.
func Start(cmd *exec.Cmd, wrap func(*exec.Cmd), admit func(pid int) error) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	var g *Gate
	if admit != nil {
		var err error
		if g, err = Hold(cmd); err != nil {
			return err
		}
	}
	if wrap != nil {
		wrap(cmd)
	}
	err := cmd.Start()
	g.Started()
	if err != nil {
		g.Shut()
		return err
	}
	if admit == nil {
		return nil
	}
	pid := cmd.Process.Pid
	err = admit(pid)
	if err == nil {
		err = g.Open()
	}
	if err != nil {
		g.Shut()
		_ = unix.Kill(-pid, unix.SIGKILL)
		_ = unix.Kill(pid, unix.SIGKILL)
		_ = cmd.Wait()
		return err
	}
	return nil
}
