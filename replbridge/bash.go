package replbridge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aiod/aiod/kernel/proc"
	"golang.org/x/sys/unix"
)

// ErrNotRunning is what WriteInput returns when no command is running:
// bash would read the text as a command of its own.
var ErrNotRunning = errors.New("no command is running")

// sendBashLocked runs c on bash: the command line on stdin, then the code
// on fd 3, ended by a NUL byte (a NUL inside the code ends it there, as
// it would end a C string in bash: it is dropped).
func (r *REPL) sendBashLocked(c command) error {
	if c.Type != "" {
		return fmt.Errorf("bash REPL: %s is not supported", c.Type)
	}
	if r.cmdW == nil || r.inW == nil {
		return ErrClosed
	}
	line := "__aiod_tok=" + c.Token + "; __aiod_read && eval \"$__aiod_code\"\n"
	if err := r.writeInLocked([]byte(line)); err != nil {
		return err
	}
	code := strings.ReplaceAll(c.Code, "\x00", "") + "\x00"
	r.cmdW.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := r.cmdW.Write([]byte(code)); err != nil {
		return fmt.Errorf("write code: %w", err)
	}
	return nil
}

// writeInLocked writes b to bash's stdin, bounded by writeTimeout.
func (r *REPL) writeInLocked(b []byte) error {
	if r.inW == nil {
		return ErrClosed
	}
	r.inW.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := r.inW.Write(b); err != nil {
		return fmt.Errorf("write to stdin: %w", err)
	}
	return nil
}

// closePipesLocked closes the write ends aiod holds: the driver (and bash,
// which reads its commands from stdin) sees EOF and exits.
func (r *REPL) closePipesLocked() {
	if r.cmdW != nil {
		r.cmdW.Close()
		r.cmdW = nil
	}
	if r.inW != nil {
		r.inW.Close()
		r.inW = nil
	}
}

// WriteInput writes text to the standard input of the command running in
// a bash REPL (what `read` or a prompting program reads). It fails with
// ErrNotRunning between commands, and on other languages.
func (r *REPL) WriteInput(ctx context.Context, text string) error {
	if r.lang != LangBash {
		return fmt.Errorf("write input: %s REPLs take no input", r.lang)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("write input: %w", err)
	}
	r.mu.Lock()
	in, code := r.inW, r.cmdW
	switch {
	case r.err != nil || r.closing || r.exited || in == nil:
		r.mu.Unlock()
		return fmt.Errorf("write input: %w", ErrClosed)
	case r.cur == nil:
		r.mu.Unlock()
		return fmt.Errorf("write input: %w", ErrNotRunning)
	}
	r.mu.Unlock()
	// Not under the lock: a command that does not read would hold up
	// the readers of its output until the deadline. Close may close the
	// pipe meanwhile; the write then fails.
	deadline := time.Now().Add(writeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := drained(ctx, code, deadline); err != nil {
		return fmt.Errorf("write input: %w", err)
	}
	in.SetWriteDeadline(deadline)
	if _, err := in.Write([]byte(text)); err != nil {
		return fmt.Errorf("write input: %w", err)
	}
	return nil
}

// drained waits until bash has read all the code aiod wrote to fd 3 (the
// pipe code writes to), or deadline. Bash reads its command line from
// stdin in chunks, not byte by byte: input written to stdin before it has
// read the line (it may still be starting) could go into its buffer with
// the line, to be run as a command later, instead of to the command. It
// reads the code (its __aiod_read) only once it has parsed the line, so
// an empty code pipe says that what comes next on stdin is the command's.
// (TIOCINQ is FIONREAD: the bytes waiting in the pipe, from either end.)
func drained(ctx context.Context, code *os.File, deadline time.Time) error {
	rc, err := code.SyscallConn()
	if err != nil {
		return err
	}
	for {
		n := -1
		if err := rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bash has not read its command within %s", writeTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// SignalJob sends sig to every process of the REPL's group but the
// interpreter itself: the command bash runs now (its pipeline, its
// subshells, and any job it left in the background), not the shell,
// whose state survives. Nothing is sent once the group leader has exited.
func (r *REPL) SignalJob(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exited {
		return fmt.Errorf("signal %s REPL: process has exited", r.lang)
	}
	for _, pid := range groupOf(r.pid) {
		if pid != r.pid {
			syscall.Kill(pid, sig)
		}
	}
	return nil
}

// groupOf lists the live processes of process group pgid, from /proc.
func groupOf(pgid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := proc.StatFields(pid) // state ppid pgrp ...
		if err != nil {
			continue
		}
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			out = append(out, pid)
		}
	}
	return out
}
