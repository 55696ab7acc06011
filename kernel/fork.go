package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/proc"
)

// reportGrace is how long a forked kernel's end waits for its template's
// report (with the exit status) once the process is known to be gone.
const reportGrace = 2 * time.Second

// errNotReady is the cause of a start that ran out of StartTimeout.
var errNotReady = errors.New("not ready")

// spawnAlikeError is a start a spawn would fail the same way, so it is not
// retried: a working directory that is not there, a process that could
// not be put under its limits (Options.Admit).
type spawnAlikeError struct{ err error }

func (e *spawnAlikeError) Error() string { return e.err.Error() }
func (e *spawnAlikeError) Unwrap() error { return e.err }

// templateError is a start that failed because of the template, not the
// kernel: the start is spawned instead. restart asks for a new template.
type templateError struct {
	err     error
	restart bool
}

func (e *templateError) Error() string { return e.err.Error() }
func (e *templateError) Unwrap() error { return e.err }

// StartMode returns how the kernel's process was started: StartFork (from
// a template) or StartSpawn.
func (k *Kernel) StartMode() string { return k.mode }

// startForked starts a kernel forked from t's process. spawn reports that
// the template could not serve this start (it was down, failed to fork, or
// its child died before it was ready): the caller spawns the kernel, and t
// has logged why.
func startForked(ctx context.Context, opts Options, t *Template) (k *Kernel, spawn bool, err error) {
	p := t.process(ctx)
	if p == nil {
		t.fallbacks.Add(1)
		return nil, true, nil
	}
	k, err = start(ctx, opts, func(k *Kernel) error { return k.launchForked(ctx, p, t.ts.pins) })
	if err == nil {
		t.starts.Add(1)
		t.childStarted()
		return k, false, nil
	}
	var te *templateError
	switch {
	case errors.As(err, &te):
		t.fail(p, te.err, te.restart)
	case ctx.Err() != nil || errors.Is(err, errNotReady) || errors.As(err, new(*spawnAlikeError)):
		return nil, false, err // no time left, or a spawn would fail alike
	default:
		// The child died, or was killed with its template, before it
		// was ready.
		t.childFailed(p, err)
	}
	t.fallbacks.Add(1)
	return nil, true, nil
}

// launchForked asks template p for the kernel process, with what launch
// would give a spawned one: the spec's command line, the environment of
// environ, the working directory, a pipe for its stdout and stderr, and
// one CPU of pins for its start-up.
func (k *Kernel) launchForked(ctx context.Context, p *templateProc, pins *proc.Pins) error {
	argv := k.spec.command(k.viewDir + "/kernel.json")
	cwd, err := forkCwd(k.opts.Cwd, k.conf != nil)
	if err != nil {
		return fmt.Errorf("launch %s: %w", argv[0], &spawnAlikeError{err})
	}
	charge := "" // the memory group the kernel will join, made now
	if k.opts.Charge != nil && p.home != "" {
		if charge, err = k.opts.Charge(); err != nil {
			return &spawnAlikeError{fmt.Errorf("limit the kernel: %w", err)}
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("launch %s: make output pipe: %w", argv[0], err)
	}
	env := envMap(k.environ())
	delete(env, "JPY_PARENT_PID")            // it dies with its template instead
	gr, g, err := proc.PipeFor(k.opts.Admit) // the child's gate, when it has limits
	if err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("launch %s: %w", argv[0], err)
	}
	cpu := pins.Take()
	c, err := p.fork(ctx, argv[3:], env, cwd, w, gr, k.conf, cpu, charge)
	w.Close()
	gr.Close() // the child holds its own; nil-safe
	if err != nil {
		pins.Give(cpu)
		r.Close()
		g.Shut()
		return &templateError{
			err:     fmt.Errorf("fork from kernel template (pid %d): %w", p.pid, err),
			restart: errors.Is(err, errTemplateWedged),
		}
	}
	if err := g.Admit(c.pid, k.opts.Admit); err != nil {
		killOrphan(c) // it was leaving at its gate; the template reaps it
		pins.Give(cpu)
		r.Close()
		return &spawnAlikeError{fmt.Errorf("limit the kernel (pid %d): %w", c.pid, err)}
	}
	// The pidfd, opened at once, watches it even if its template goes quiet.
	pidfd := proc.Pidfd(c.pid)
	k.mode = StartFork
	k.watch(c.pid, r, func() *jupyter.DeadError { return k.waitForked(c, pidfd) })
	if cpu >= 0 { // its threads get all CPUs back once its start-up is over
		k.wg.Add(1) // before the start is over: teardown waits for it only then
		go func() {
			defer k.wg.Done()
			if err := pins.UnpinWhenSettled(k.exitCtx, k.pid, cpu); err != nil {
				k.log.Warn("could not give the kernel all CPUs after its start-up", "cpu", cpu, "err", err)
			}
		}()
	}
	k.log.Debug("kernel forked", "template_pid", p.pid, "argv", argv, "cpu", cpu)
	testHookForked()
	return nil
}

// testHookForked runs once the template has reported a fork (tests).
var testHookForked = func() {}

// forkCwd is the forked kernel's working directory as an absolute path
// (the template runs in /): dir, or aiod's own when empty. It fails as
// exec would for a folder that is not there; a confined kernel's folder is
// in its view, checked there.
func forkCwd(dir string, confined bool) (string, error) {
	if dir == "" {
		return os.Getwd()
	}
	abs, err := filepath.Abs(dir)
	if err != nil || confined {
		return abs, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("chdir %s: %w", dir, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("chdir %s: not a directory", dir)
	}
	return abs, nil
}

// envMap turns KEY=VALUE entries into a map, later entries winning, as
// exec does.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// waitForked waits for the forked process c to end: the template's report
// says how; the pidfd, when there is one, says that it ended even if the
// template does not report (it is wedged), and then the cause is unknown.
func (k *Kernel) waitForked(c *forkedChild, pidfd *os.File) *jupyter.DeadError {
	if pidfd == nil {
		<-c.exited
		return c.dead
	}
	defer pidfd.Close()
	c.waitOn(pidfd)
	proc.WaitPidfd(pidfd) // till the exit, or the report (c.end), whichever first
	t := time.NewTimer(reportGrace)
	defer t.Stop()
	select {
	case <-c.exited:
		return c.dead
	case <-t.C:
		return &jupyter.DeadError{Runtime: deadRuntime, Cause: "exited (its kernel template did not report how)", ExitCode: -1}
	}
}
