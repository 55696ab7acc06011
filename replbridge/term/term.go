// Package term runs an interactive shell on a pseudo-terminal: the
// process the Jupyter terminals API and the page's terminal talk to. It
// keeps the recent output (a client that reattaches gets the screen
// replayed), hands every read to its subscribers, resizes the terminal,
// and ends the process group on Close. It knows nothing of HTTP.
package term

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aiod/aiod/kernel/proc"
	"github.com/creack/pty"
)

// ReplayBytes is how much recent output a terminal keeps for reattaching
// clients.
const ReplayBytes = 64 << 10

const (
	writeTimeout = 10 * time.Second
	hupGrace     = time.Second
	killWait     = 5 * time.Second
)

// Options configure Start. Zero values are usable.
type Options struct {
	Shell      string              // the program; "" is bash (else sh)
	Args       []string            // its arguments; nil is an interactive bash without rc files
	Cwd        string              // where it starts; "" the daemon's folder
	Environ    []string            // base environment; nil is os.Environ()
	Env        []string            // extra KEY=VALUE
	Credential *syscall.Credential // run as that user; nil is the daemon's
	Wrap       func(*exec.Cmd)     // confines the command (tenant isolation); nil none
	Admit      func(pid int) error // puts the shell under its limits while it waits at a gate (package proc); nil none
	Rows, Cols uint16              // the initial size; 0 is 24x80
}

// Term is one shell on a pseudo-terminal. Its methods are safe for
// concurrent use.
type Term struct {
	cmd  *exec.Cmd
	ptm  *os.File // the master side, read by the reader goroutine
	tty  string   // the slave's name, /dev/pts/N
	pid  int
	born string        // the shell's start time (/proc/pid/stat), to know its pid again
	done chan struct{} // closed once the process has exited and the reader returned

	closeOnce sync.Once

	mu     sync.Mutex
	recent []byte // the last ReplayBytes of output
	subs   map[int]func([]byte)
	nextID int
	last   time.Time // last input or output
	err    error     // why the process ended
	exited bool
}

// Start starts the shell.
func Start(opts Options) (*Term, error) {
	path := opts.Shell
	if path == "" {
		var err error
		if path, err = exec.LookPath("bash"); err != nil {
			if path, err = exec.LookPath("sh"); err != nil {
				return nil, errors.New("start terminal: neither bash nor sh is on PATH")
			}
		}
	}
	args := opts.Args
	if args == nil && filepath.Base(path) == "bash" {
		args = []string{"--norc", "--noprofile", "-i"}
	}
	ptm, pts, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("start terminal: open a pseudo-terminal: %w", err)
	}
	rows, cols := opts.Rows, opts.Cols
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	if err := pty.Setsize(ptm, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		ptm.Close()
		pts.Close()
		return nil, fmt.Errorf("start terminal: set its size: %w", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = opts.Cwd
	env := opts.Environ
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(append(append([]string(nil), env...), "TERM=xterm-256color", "PS1=\\w\\$ "), opts.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	// A session of its own with the terminal as its controlling one (fd 0
	// in the child): Ctrl-C reaches the foreground job, not aiod.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: opts.Credential}
	if err := proc.Start(cmd, opts.Wrap, opts.Admit); err != nil {
		ptm.Close()
		pts.Close()
		return nil, fmt.Errorf("start terminal %s: %w", path, err)
	}
	pts.Close() // the child holds its own
	t := &Term{cmd: cmd, ptm: ptm, tty: pts.Name(), pid: cmd.Process.Pid, done: make(chan struct{}),
		subs: map[int]func([]byte){}, last: time.Now()}
	t.born, _ = procStat(t.pid, 19) // not reaped before wait runs
	if opts.Credential != nil {
		// The shell's user must be able to open its own terminal again
		// (tty, stty, a program that reopens /dev/tty).
		_ = os.Chown(t.tty, int(opts.Credential.Uid), -1)
	}
	readerDone := make(chan struct{})
	go t.read(readerDone)
	go t.wait(readerDone)
	return t, nil
}

// read is the one reader of the master side.
func (t *Term) read(done chan struct{}) {
	defer close(done)
	buf := make([]byte, 32<<10)
	for {
		n, err := t.ptm.Read(buf)
		if n > 0 {
			b := append([]byte(nil), buf[:n]...)
			t.mu.Lock()
			t.recent = append(t.recent, b...)
			if over := len(t.recent) - ReplayBytes; over > 0 {
				t.recent = append([]byte(nil), t.recent[over:]...)
			}
			t.last = time.Now()
			for _, fn := range t.subs {
				fn(b)
			}
			t.mu.Unlock()
		}
		if err != nil {
			return // EIO once the last process holding the terminal is gone
		}
	}
}

// wait reaps the shell, ends what is left of its session, lets the reader
// drain and closes done.
func (t *Term) wait(readerDone chan struct{}) {
	err := t.cmd.Wait()
	t.mu.Lock()
	t.exited = true
	if err == nil {
		err = errors.New("the shell exited")
	} else {
		err = fmt.Errorf("the shell ended: %w", err)
	}
	t.err = err
	t.mu.Unlock()
	killSession(t.pid, t.born) // whatever it left in its session: job groups included
	select {
	case <-readerDone:
	case <-time.After(time.Second):
		// A process outside the group still holds the terminal open.
		t.ptm.Close()
		<-readerDone
	}
	t.ptm.Close()
	close(t.done)
}

// Write sends input to the terminal, as typed (Ctrl-C is "\x03").
func (t *Term) Write(p []byte) error {
	select {
	case <-t.done:
		return errors.New("write to terminal: it has ended")
	default:
	}
	t.ptm.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := t.ptm.Write(p); err != nil {
		return fmt.Errorf("write to terminal: %w", err)
	}
	t.mu.Lock()
	t.last = time.Now()
	t.mu.Unlock()
	return nil
}

// Resize sets the terminal's size; the foreground job gets SIGWINCH.
func (t *Term) Resize(rows, cols uint16) error {
	if rows == 0 || cols == 0 {
		return fmt.Errorf("resize terminal: %dx%d is not a size", rows, cols)
	}
	if err := pty.Setsize(t.ptm, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		return fmt.Errorf("resize terminal: %w", err)
	}
	return nil
}

// Attach registers fn for every later output and returns the recent
// output to replay first; fn runs on the reader goroutine with the
// terminal locked and must not block. detach removes it.
func (t *Term) Attach(fn func([]byte)) (replay []byte, detach func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := t.nextID
	t.nextID++
	t.subs[id] = fn
	return append([]byte(nil), t.recent...), func() {
		t.mu.Lock()
		delete(t.subs, id)
		t.mu.Unlock()
	}
}

// Attached is the number of attached clients.
func (t *Term) Attached() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.subs)
}

// LastActivity is the time of the last input or output.
func (t *Term) LastActivity() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// TTY is the terminal's name as the shell sees it (/dev/pts/N).
func (t *Term) TTY() string { return t.tty }

// PID is the shell's process id.
func (t *Term) PID() int { return t.pid }

// Done is closed once the shell has ended and the reader returned.
func (t *Term) Done() <-chan struct{} { return t.done }

// Err says why the shell ended; nil while it runs.
func (t *Term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Close ends the shell: SIGHUP to its session's process group (what a
// closed terminal sends), then SIGKILL, and waits for it, bounded by ctx
// and then killWait. It is idempotent.
func (t *Term) Close(ctx context.Context) error {
	t.closeOnce.Do(func() { t.signal(syscall.SIGHUP) })
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
	case <-time.After(hupGrace):
	}
	t.signal(syscall.SIGKILL)
	killSession(t.pid, t.born)
	select {
	case <-t.done:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("close terminal pid %d: still running %s after SIGKILL", t.pid, killWait)
	}
}

func (t *Term) signal(sig syscall.Signal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.exited {
		syscall.Kill(-t.pid, sig)
	}
}

// killSession sends SIGKILL to every process of session sid (the shell
// started it at born, its start time; its jobs have process groups of
// their own within it). Linux gives sid to no new process while a process
// of the session lives; once the session is empty it may, and the leader
// of a new session with that id (another caller's shell) must not be
// killed: a process sid with another start time stops it.
func killSession(sid int, born string) {
	if now, err := procStat(sid, 19); err == nil && now != born {
		return // sid is another process's now
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := procStat(pid, 3); err == nil && s == strconv.Itoa(sid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// procStat is field i of /proc/pid/stat counted from the state (0) after
// the command's name: 3 is the session, 19 the start time.
func procStat(pid, i int) (string, error) {
	f, err := proc.StatFields(pid)
	if err != nil {
		return "", err
	}
	if len(f) <= i {
		return "", fmt.Errorf("short /proc/%d/stat", pid)
	}
	return f[i], nil
}

// String describes the terminal for logs.
func (t *Term) String() string { return "terminal " + strings.TrimPrefix(t.tty, "/dev/") }
