package replbridge

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/proc"
)

// Languages a REPL can run.
const (
	LangPython     = "python"
	LangJavaScript = "javascript"
	LangBash       = "bash"
)

// ErrClosed is what Err returns after Close ended a REPL, and what Execute
// returns on a closed REPL.
var ErrClosed = errors.New("replbridge: REPL closed")

//go:embed driver/py_driver.py
var pyDriver string

//go:embed driver/node_driver.js
var nodeDriver string

//go:embed driver/bash_driver.sh
var bashDriver string

// DefaultStartTimeout bounds a start whose Options.StartTimeout is 0.
const DefaultStartTimeout = 10 * time.Second

const (
	writeTimeout = 10 * time.Second // one command write to fd 3
	drainTimeout = time.Second      // readers' EOF after the process is gone
	closeGrace   = 500 * time.Millisecond
	termGrace    = time.Second
	killWait     = 5 * time.Second
)

// Options configure Start. Zero values are usable except Language.
type Options struct {
	Language    string              // "python", "javascript" or "bash"
	Interpreter string              // path or name; empty: FindPython / FindNode
	Handler     jupyter.Handler     // receives every message; nil drops them
	Cwd         string              // working directory; empty: the gateway's
	Env         []string            // extra KEY=VALUE, appended to Environ
	Environ     []string            // base environment; nil is the gateway's own (os.Environ())
	Credential  *syscall.Credential // runs the interpreter as that user; nil is the gateway's
	Wrap        func(*exec.Cmd)     // confines the interpreter's command (tenant isolation); nil none
	// Admit, when set, puts the interpreter's process under its limits
	// before anything of it runs: it waits at a gate (package proc) until
	// Admit returns; an error ends it and fails the start.
	Admit        func(pid int) error
	StartTimeout time.Duration // until the driver is ready; 0 means 10 s
	Logger       *slog.Logger  // nil means slog.Default()
}

var (
	_ jupyter.Runtime   = (*REPL)(nil)
	_ jupyter.Completer = (*REPL)(nil)
)

// REPL is one native interpreter process driven over pipes. It implements
// jupyter.Runtime; all methods are safe for concurrent use. Executions are
// queued and run one at a time in arrival order.
type REPL struct {
	// Set once by Start.
	lang, path, session string
	pid                 int
	handler             jupyter.Handler
	log                 *slog.Logger
	cmd                 *exec.Cmd
	outR, errR, ctlR    *os.File // read ends, owned by their reader goroutine
	ready               chan string
	readers             sync.WaitGroup
	done                chan struct{} // closed by the waiter, last

	closeOnce sync.Once

	mu      sync.Mutex // guards the fields below
	cmdW    *os.File   // fd 3 write end; nil once closed
	inW     *os.File   // bash: the shell's stdin, write end; nil once closed
	version string
	err     error
	closing bool
	exited  bool // the leader has exited: the group id may be reused, signal no more
	queue   []jupyter.ExecuteRequest
	cur     *execution
	count   int
	last    jupyter.Header             // parent of output arriving between executions
	errTail []byte                     // last stderr bytes, for start failures
	asks    map[string]chan *driverMsg // completions and inspections waiting for the driver, by id
}

// Start launches the interpreter with its driver and returns once the driver
// says it is ready, bounded by ctx and opts.StartTimeout. On failure no
// process or goroutine is left behind.
func Start(ctx context.Context, opts Options) (*REPL, error) {
	args, err := driverArgs(opts.Language)
	if err != nil {
		return nil, err
	}
	path, err := findInterpreter(opts.Language, opts.Interpreter)
	if err != nil {
		return nil, fmt.Errorf("start %s REPL: %w", opts.Language, err)
	}
	r := newREPL(opts, path)
	if err := r.launch(opts, args); err != nil {
		return nil, fmt.Errorf("start %s REPL: %w", opts.Language, err)
	}
	// The interpreter's own start-up follows: the caller's start slot is
	// given back once it stops keeping a CPU busy, or when it is ready.
	settled := proc.WhenSettled(ctx, r.pid, jupyter.LaunchedHook(ctx))
	err = r.awaitReady(ctx, opts.StartTimeout)
	settled()
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
		defer cancel()
		r.Close(closeCtx)
		return nil, fmt.Errorf("start %s REPL %s: %w", opts.Language, path, err)
	}
	return r, nil
}

func driverArgs(lang string) ([]string, error) {
	switch lang {
	case LangPython:
		return []string{"-u", "-c", pyDriver}, nil
	case LangJavaScript:
		return []string{"--expose-internals", "-e", nodeDriver}, nil
	case LangBash:
		return []string{"--norc", "--noprofile", "--noediting", "-i"}, nil
	}
	return nil, fmt.Errorf("start REPL: unsupported language %q (want python, javascript or bash)", lang)
}

func newREPL(opts Options, path string) *REPL {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &REPL{
		lang:    opts.Language,
		path:    path,
		session: jupyter.NewID(),
		handler: opts.Handler,
		log:     log.With("runtime", "native", "language", opts.Language),
		ready:   make(chan string, 1),
		done:    make(chan struct{}),
	}
}

// launch creates the pipes, starts the process and the goroutines the
// waiter owns: three pipe readers. The waiter itself is started last.
func (r *REPL) launch(opts Options, args []string) error {
	var p [4][2]*os.File // cmd, ctl, out, err: {read, write}
	for i := range p {
		rd, wr, err := os.Pipe()
		if err != nil {
			closeAll(p[:i])
			return fmt.Errorf("create pipe: %w", err)
		}
		p[i] = [2]*os.File{rd, wr}
	}
	cmd := exec.Command(r.path, args...)
	cmd.Dir = opts.Cwd
	cmd.Env = opts.Environ
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append([]string(nil), cmd.Env...)
	if r.lang == LangPython { // print reaches the pipe at once, in UTF-8
		cmd.Env = append(cmd.Env, "PYTHONUNBUFFERED=1", "PYTHONIOENCODING=utf-8")
	}
	cmd.Env = append(cmd.Env, opts.Env...)
	cmd.Stdout, cmd.Stderr = p[2][1], p[3][1]
	cmd.ExtraFiles = []*os.File{p[0][0], p[1][1]}
	var in [2]*os.File // bash: stdin
	if r.lang == LangBash {
		rd, wr, err := os.Pipe()
		if err != nil {
			closeAll(p[:])
			return fmt.Errorf("create pipe: %w", err)
		}
		in = [2]*os.File{rd, wr}
		// The driver moves fd 5 to stderr once bash's start-up notes
		// (no job control without a terminal) have gone to /dev/null.
		cmd.Stdin, cmd.Stderr = rd, nil
		cmd.ExtraFiles = append(cmd.ExtraFiles, p[3][1])
	}
	// proc.Start adds the parent-death signal: the REPL dies with aiod even
	// while it runs user code (it only sees its command pipe close between
	// two commands).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: opts.Credential}
	if err := proc.Start(cmd, opts.Wrap, opts.Admit); err != nil {
		closeAll(p[:])
		if in[0] != nil {
			closeAll([][2]*os.File{in})
		}
		return fmt.Errorf("run %s: %w", r.path, err)
	}
	for _, f := range []*os.File{p[0][0], p[1][1], p[2][1], p[3][1], in[0]} {
		if f != nil {
			f.Close() // the child holds its own copies
		}
	}
	r.cmd, r.pid, r.cmdW, r.inW = cmd, cmd.Process.Pid, p[0][1], in[1]
	r.ctlR, r.outR, r.errR = p[1][0], p[2][0], p[3][0]
	r.readers.Add(3)
	go r.readControl()
	go r.readStream(r.outR, "stdout")
	go r.readStream(r.errR, "stderr")
	go r.wait()
	if r.lang == LangBash {
		r.mu.Lock()
		if err := r.writeInLocked([]byte(bashDriver)); err != nil {
			r.log.Error("send the driver to bash", "pid", r.pid, "err", err)
			syscall.Kill(-r.pid, syscall.SIGKILL) // the waiter reports it; Start's wait sees done
		}
		r.mu.Unlock()
	}
	return nil
}

func closeAll(pipes [][2]*os.File) {
	for _, p := range pipes {
		p[0].Close()
		p[1].Close()
	}
}

func (r *REPL) awaitReady(ctx context.Context, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	// On a machine loaded past its cores the wait goes on while the
	// process waits for a CPU, up to three times the timeout, as a
	// kernel's start does.
	began := time.Now()
	wctx, cancel := proc.WithStarvedTimeout(ctx, r.pid, timeout, 3*timeout, ErrNotReady)
	defer cancel()
	select {
	case v := <-r.ready:
		r.mu.Lock()
		r.version = v
		r.mu.Unlock()
		return nil
	case <-r.done:
		return fmt.Errorf("wait for driver: %w%s", r.Err(), r.stderrTail())
	case <-wctx.Done():
		if ctx.Err() != nil {
			return fmt.Errorf("wait for driver: %w", ctx.Err())
		}
		return fmt.Errorf("wait for driver: %w after %s%s", ErrNotReady, time.Since(began).Round(100*time.Millisecond), r.stderrTail())
	}
}

// ErrNotReady is a start whose driver did not say it was ready within
// Options.StartTimeout.
var ErrNotReady = errors.New("not ready")

func (r *REPL) stderrTail() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errTail) == 0 {
		return ""
	}
	return "; stderr: " + string(r.errTail)
}

// wait is the one goroutine that waits for the process. When the group
// leader has exited it kills what is left of the group, reaps the leader,
// lets the readers drain (closing their pipes if something outside the
// group still holds them), records why, and closes done.
func (r *REPL) wait() {
	waitExited(r.pid)
	r.mu.Lock()
	r.exited = true
	r.mu.Unlock()
	syscall.Kill(-r.pid, syscall.SIGKILL) // leader not reaped yet: the group id is still ours
	werr := r.cmd.Wait()
	drained := make(chan struct{})
	go func() { r.readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		r.outR.Close()
		r.errR.Close()
		r.ctlR.Close()
		<-drained
	}
	r.mu.Lock()
	r.closePipesLocked()
	if r.closing {
		r.err = ErrClosed
	} else {
		r.err = exitError(r.lang+" REPL", r.cmd.ProcessState, werr)
		r.log.Warn("native REPL died", "pid", r.pid, "err", r.err)
	}
	r.queue, r.cur = nil, nil
	r.mu.Unlock()
	close(r.done)
}

// waitExited blocks until pid has exited, leaving it unreaped (WNOWAIT).
func waitExited(pid int) {
	const pPID, wNOWAIT = 1, 0x01000000
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|wNOWAIT, 0, 0)
		if e != syscall.EINTR {
			return
		}
	}
}

// Close ends the REPL: it closes the command pipe (the driver exits on EOF),
// then sends SIGTERM and finally SIGKILL to the process group, each after a
// grace bounded by ctx, and waits until the process and every goroutine of
// the REPL are gone. It is idempotent; after it, Done is closed and Err is
// ErrClosed (or the cause of death, if the process had died before).
func (r *REPL) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closing = true
		r.closePipesLocked() // the driver (bash: the shell) exits on EOF
		r.mu.Unlock()
	})
	if r.awaitDone(ctx, closeGrace) {
		return nil
	}
	r.signal(syscall.SIGTERM)
	if r.awaitDone(ctx, termGrace) {
		return nil
	}
	r.signal(syscall.SIGKILL)
	if r.awaitDone(context.WithoutCancel(ctx), killWait) {
		return nil
	}
	return fmt.Errorf("close %s REPL pid %d: still running %s after SIGKILL", r.lang, r.pid, killWait)
}

// awaitDone reports whether done closed within d (cut short by ctx).
func (r *REPL) awaitDone(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Interrupt sends SIGINT to the process group. The running code ends with a
// KeyboardInterrupt (python) or Interrupted (javascript) error and the
// state survives; whether idle follows is for the caller to watch. It does
// not block.
func (r *REPL) Interrupt(ctx context.Context) error {
	select {
	case <-r.done:
		return fmt.Errorf("interrupt %s REPL: %w", r.lang, r.Err())
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupt %s REPL: %w", r.lang, err)
	}
	if r.lang == LangBash {
		// A SIGINT that bash gets before it has read the command (still at
		// its prompt) is lost, and the command then runs: wait until it has.
		r.mu.Lock()
		running, code := r.cur != nil, r.cmdW
		r.mu.Unlock()
		if running && code != nil {
			if err := drained(ctx, code, time.Now().Add(writeTimeout)); err != nil {
				return fmt.Errorf("interrupt %s REPL: %w", r.lang, err)
			}
		}
	}
	if r.lang == LangJavaScript && !r.sigintDue() {
		return nil
	}
	if err := r.signal(syscall.SIGINT); err != nil {
		return fmt.Errorf("interrupt %s REPL pid %d: %w", r.lang, r.pid, err)
	}
	return nil
}

// sigintDue says whether a SIGINT may go to the Node.js driver now, and
// notes it: only while a cell runs, and a second one for the same cell no
// sooner than a second after the first. Node's vm takes the SIGINT
// listeners off while a cell's synchronous part runs and puts them back
// after: two SIGINTs that close together were seen to be both lost (the
// cell ran on), and one landing as a cell ends to interrupt a later cell
// before its first line.
func (r *REPL) sigintDue() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.cur
	if x == nil {
		return false
	}
	now := time.Now()
	if !x.sigint.IsZero() && now.Sub(x.sigint) < time.Second {
		return false
	}
	x.sigint = now
	return true
}

// signal sends sig to the process group while its leader has not exited.
func (r *REPL) signal(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exited {
		return errors.New("process has exited")
	}
	return syscall.Kill(-r.pid, sig)
}

// Done is closed when the process has exited and every goroutine of the
// REPL has returned, whether by Close or by death.
func (r *REPL) Done() <-chan struct{} { return r.done }

// Err is nil while the REPL runs, ErrClosed after Close, or an error naming
// the cause of death ("python REPL died: exited with code 3").
func (r *REPL) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Info describes the REPL: backend "native", the interpreter path as Name.
func (r *REPL) Info() jupyter.RuntimeInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return jupyter.RuntimeInfo{Backend: "native", Language: r.lang, Name: r.path, PID: r.pid, Version: r.version}
}

// exitError describes how the REPL's process ended.
func exitError(runtime string, ps *os.ProcessState, werr error) *jupyter.DeadError {
	if ps == nil {
		return &jupyter.DeadError{Runtime: runtime, Cause: fmt.Sprintf("wait failed: %v", werr), ExitCode: -1}
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	return jupyter.ExitError(runtime, ws, werr)
}
