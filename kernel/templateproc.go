package kernel

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aiod/aiod/kernel/bufconn"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/proc"
	"github.com/goccy/go-json"
)

// templateBoot is the template's command line: it reads the program and
// its configuration, NUL-separated, from descriptor 4 and runs the program
// with the configuration as sys.argv[1].
const templateBoot = "import os, sys\n" +
	"with os.fdopen(4, 'rb') as f:\n    src, cfg = f.read().split(b'\\0', 1)\n" +
	"sys.argv[1:] = [cfg.decode()]\n" +
	"exec(compile(src, 'aiod-template', 'exec'))\n"

// templateSourceTimeout bounds the write of the template's program.
const templateSourceTimeout = 30 * time.Second

// templateDriver is the Python program a template process runs; its header
// comment describes the protocol spoken on descriptor 3.
//
//go:embed driver/template.py
var templateDriver string

// kernelPatches is aiod's changes to ipykernel (driver/patches.py), which
// forked and spawned kernels of ipykernel specs both get.
//
//go:embed driver/patches.py
var kernelPatches string

const (
	// templateStopGrace is how long a template may take to kill its
	// children and exit once its socket is closed, before SIGKILL.
	templateStopGrace = 5 * time.Second
	// forkReplyTimeout bounds the template's silence while a fork waits
	// for its reply: a template that answers no request (not only this
	// one) for that long, and whose threads were not starved of CPU, is
	// wedged and is restarted. A starved one gets up to three times as
	// long. Its children die with it, so slowness alone must not count.
	forkReplyTimeout = 10 * time.Second
	// maxTemplateMsg is the largest message the template sends.
	maxTemplateMsg = 1 << 16
)

// templateMsg is every message the template sends (see driver/template.py).
type templateMsg struct {
	Op        string            `json:"op"`
	ID        uint64            `json:"id"`
	PID       int               `json:"pid"`
	Error     string            `json:"error"`
	Code      *int              `json:"code"`
	Signal    *int              `json:"signal"`
	Python    string            `json:"python"`
	IPyKernel string            `json:"ipykernel"`
	Seconds   float64           `json:"seconds"`
	Failed    map[string]string `json:"failed"`
	Threads   int               `json:"threads"`
	ProbeDir  string            `json:"probe_dir"` // of "ready"
	Pages     int               `json:"pages"`     // of "hot"
}

// forkRequest is what aiod asks the template for; the write end of the
// child's output pipe travels with it as SCM_RIGHTS.
type forkRequest struct {
	Op   string            `json:"op"`
	ID   uint64            `json:"id"`
	Args []string          `json:"args"` // the kernel app's command line after the launcher
	Env  map[string]string `json:"env"`
	Cwd  string            `json:"cwd"`
	// Confine is the child's confinement plan (Confinement.Plan); its
	// descriptors follow the output pipe's.
	Confine json.RawMessage `json:"confine,omitempty"`
	// Gate: the descriptor after the output pipe's is the child's gate
	// (Options.Admit), read before anything else.
	Gate bool `json:"gate,omitempty"`
	// Charge is the cgroup.procs file the template forks in (Options.Charge).
	Charge string `json:"charge,omitempty"`
	CPU    *int   `json:"cpu,omitempty"` // the one CPU the child starts on (proc.Pins)
}

// forkedChild is a kernel process forked by a template. The template reaps
// it and reports how it ended; exited is closed once dead is set.
type forkedChild struct {
	pid    int
	exited chan struct{}
	dead   *jupyter.DeadError
	pidfd  atomic.Pointer[os.File] // waited on (proc.WaitPidfd); the report wakes it
}

// end records how the child ended, closes exited and wakes the wait on
// its pidfd (a deadline in the past).
func (c *forkedChild) end(d *jupyter.DeadError) {
	c.dead = d
	close(c.exited)
	if f := c.pidfd.Load(); f != nil {
		f.SetReadDeadline(time.Now()) //nolint:errcheck // closed: that wait is over
	}
}

// waitOn makes f the pidfd end wakes (each writes, then reads the other's).
func (c *forkedChild) waitOn(f *os.File) {
	c.pidfd.Store(f)
	if isClosed(c.exited) {
		f.SetReadDeadline(time.Now()) //nolint:errcheck // see end
	}
}

// forkResult answers a fork request: the child, or why there is none.
type forkResult struct {
	child *forkedChild
	err   error
}

// templateProc is one running template process and the socket to it. Its
// reader goroutine is the only reader of conn; writes are serialised by wmu.
type templateProc struct {
	// Set once by launchTemplate.
	pid    int
	cmd    *exec.Cmd
	conn   *net.UnixConn
	log    *slog.Logger
	output *proc.Output
	quiet  time.Duration // forkReplyTimeout, or a test's
	info   templateMsg   // the ready message
	ready  chan struct{} // closed when info is set
	hot    templateMsg   // the last "hot" message; guarded by mu
	hotSet chan struct{} // closed when hot is set
	exited chan struct{} // closed when the process has been reaped
	done   chan struct{} // closed when the reader, the waiter and the copier are over
	wg     sync.WaitGroup

	home  string       // TemplateConfig.ChargeHome
	wmu   sync.Mutex   // one writer at a time on conn
	heard atomic.Int64 // when the last message came, in Unix nanoseconds

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]chan forkResult // fork requests waiting for their reply
	children map[int]*forkedChild       // forked and not reported ended
	ended    bool                       // the reader is over: no more reports
	exitErr  *jupyter.DeadError         // how the process ended; set before exited is closed
}

// templateEnv is the template's environment: what a spawned kernel of spec
// gets, less Options.Env, which each fork request brings, and less
// JPY_PARENT_PID: a forked kernel dies with its template (its parent-death
// signal), and nothing in it needs aiod's pid.
func templateEnv(spec *Spec, base []string) []string {
	env := baseEnviron(base)
	return append(env, spec.environ(env)...)
}

// templateArgs is the kernel app's command line of spec's kernels without
// "-f FILE": what the template configures its kernel app with.
func templateArgs(spec *Spec) []string {
	argv := spec.command("{connection_file}")[3:]
	out := make([]string, 0, len(argv))
	for i := 0; i < len(argv); i++ {
		if argv[i] == "-f" && i+1 < len(argv) {
			i++
			continue
		}
		out = append(out, argv[i])
	}
	return out
}

// launchTemplate starts a template process for spec and returns once it
// has imported what it preloads and said it is ready. It gives up when ctx
// ends or past cfg.ReadyTimeout (stretched while the template is starved),
// and then leaves nothing running.
func launchTemplate(ctx context.Context, spec *Spec, cfg TemplateConfig, log *slog.Logger) (*templateProc, error) {
	preload := cfg.Preload
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("make template socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "template-socket"), os.NewFile(uintptr(fds[1]), "template-socket")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("make template socket: %w", err)
	}
	conn := fc.(*net.UnixConn)
	if cfg.ChargeHome != "" && cfg.Credential != nil && cfg.Credential.Uid != 0 {
		cfg.ChargeHome, cfg.NoHotPages = "", true // it could not fork in the kernels' memory groups
	}
	cfgArg := map[string]any{"parent": os.Getpid(), "preload": preload, "module": spec.Argv[2],
		"args": templateArgs(spec), "patches": kernelPatches, "hot": !cfg.NoHotPages}
	if cfg.ChargeHome != "" { // kernels first for the OOM killer, never the template
		cfgArg["charge_home"], cfgArg["oom_score_adj"] = cfg.ChargeHome, 1000
	}
	if cfg.Confine != "" {
		cfgArg["confine"], cfgArg["setup"] = cfg.Confine, cfg.Setup
	}
	// The program and its configuration (the sandbox's applier and plan
	// among it) come on a pipe, not the command line: every local user
	// reads a command line in ps, and every forked kernel kept the
	// template's.
	src, srcW, err := os.Pipe()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("make template source pipe: %w", err)
	}
	cmd := exec.Command(spec.Argv[0], "-c", templateBoot)
	cmd.Dir = "/"
	cmd.Env = templateEnv(spec, cfg.Environ)
	cmd.ExtraFiles = []*os.File{theirs, src} // descriptors 3 and 4
	// Its own process group, so that signals meant for aiod's group do not
	// reach it; SIGTERM when aiod dies (the template then kills its
	// children), as a second line behind the socket's end of file.
	// Go sets the parent-death signal after the credential change, which
	// would otherwise clear it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM, Credential: cfg.Credential}
	r, w, err := os.Pipe()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("make template output pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	src.Close() // the template's copy is its own: a template that dies breaks the pipe
	if err != nil {
		conn.Close()
		r.Close()
		srcW.Close()
		return nil, fmt.Errorf("launch template %s: %w", spec.Argv[0], err)
	}
	if cfg.ChargeHome != "" { // needs CAP_SYS_RESOURCE; the kernels' 1000 is the guard
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", cmd.Process.Pid), []byte("-1000"), 0)
	}
	arg, _ := json.Marshal(cfgArg)
	// The template reads it all before anything else; a template that
	// dies first ends the write (EPIPE), and the deadline bounds a stuck
	// one, which then never says it is ready.
	_ = srcW.SetWriteDeadline(time.Now().Add(templateSourceTimeout))
	srcDone := make(chan struct{})
	go func() {
		defer close(srcDone)
		defer srcW.Close()
		_, _ = srcW.Write(append(append([]byte(templateDriver), 0), arg...))
	}()
	defer func() { <-srcDone }()
	p := &templateProc{
		pid: cmd.Process.Pid, cmd: cmd, conn: conn, quiet: cmp.Or(cfg.replyTimeout, forkReplyTimeout), home: cfg.ChargeHome,
		ready: make(chan struct{}), hotSet: make(chan struct{}), exited: make(chan struct{}), done: make(chan struct{}),
		pending: map[uint64]chan forkResult{}, children: map[int]*forkedChild{},
	}
	p.log = log.With("template_pid", p.pid)
	p.output = &proc.Output{Log: p.log}
	p.wg.Add(3)
	go p.copyOutput(r)
	go p.read()
	go p.wait()
	go func() { p.wg.Wait(); close(p.done) }()
	// On a loaded machine the wait stretches while the template waits for
	// a CPU, rather than throw its imports' seconds of CPU away.
	ctx, cancel := proc.WithStarvedTimeout(ctx, p.pid, cfg.ReadyTimeout, starvedTimeouts*cfg.ReadyTimeout/4,
		fmt.Errorf("not ready within %s", cfg.ReadyTimeout))
	defer cancel()
	select {
	case <-p.ready:
		return p, nil
	case <-p.exited:
		err = p.exitErr
		if out := p.output.String(); out != "" {
			err = fmt.Errorf("%w: %s", err, lastLine(out))
		}
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	p.stop()
	return nil, fmt.Errorf("start kernel template: %w", err)
}

func (p *templateProc) copyOutput(r *os.File) {
	defer p.wg.Done()
	defer r.Close()
	bufconn.NewPipe(r).Copy(p.output) //nolint:errcheck // ends with the process
}

// wait reaps the template process; its socket's end then ends the reader.
func (p *templateProc) wait() {
	defer p.wg.Done()
	err := p.cmd.Wait()
	var st syscall.WaitStatus
	if ps := p.cmd.ProcessState; ps != nil {
		st, _ = ps.Sys().(syscall.WaitStatus)
	}
	p.mu.Lock()
	p.exitErr = deadFromExit(st, err)
	p.mu.Unlock()
	close(p.exited)
	p.conn.Close() // in case a descendant still holds the other end
}

// read is conn's only reader: it routes fork replies to their requests and
// exit reports to the children. When the template is gone every child it
// had is reported ended: they die with it (PR_SET_PDEATHSIG).
func (p *templateProc) read() {
	defer p.wg.Done()
	buf := make([]byte, maxTemplateMsg)
	for {
		n, _, _, _, err := p.conn.ReadMsgUnix(buf, nil)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.log.Debug("read from kernel template failed", "err", err)
			}
			break
		}
		p.heard.Store(time.Now().UnixNano())
		var m templateMsg
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			p.log.Warn("kernel template sent a malformed message", "err", err)
			continue
		}
		p.handle(m)
	}
	p.endChildren()
	// The probe's folder, which the template removes unless it was killed.
	if d := p.info.ProbeDir; filepath.IsAbs(d) && strings.HasPrefix(filepath.Base(d), "aiod-probe-") {
		os.RemoveAll(d) //nolint:errcheck // best effort, in the temporary folder
	}
}

func (p *templateProc) handle(m templateMsg) {
	switch m.Op {
	case "ready":
		select {
		case <-p.ready: // said twice: keep the first
		default:
			p.info = m
			close(p.ready)
		}
	case "hot": // after ready, and when the pins go (template.py's "Hot pages")
		p.mu.Lock()
		p.hot = m
		p.mu.Unlock()
		if !isClosed(p.hotSet) {
			close(p.hotSet)
		}
		p.log.Info("kernel template's hot pages, which its forks copy at once", "pages", m.Pages, "seconds", m.Seconds, "err", m.Error)
	case "forked":
		var res forkResult
		if m.PID > 0 {
			res.child = &forkedChild{pid: m.PID, exited: make(chan struct{})}
		} else {
			res.err = errors.New(m.Error)
		}
		p.mu.Lock()
		reply, waited := p.pending[m.ID]
		delete(p.pending, m.ID)
		if res.child != nil {
			p.children[m.PID] = res.child
		}
		p.mu.Unlock()
		if waited {
			reply <- res // buffered
		} else if res.child != nil {
			killOrphan(res.child) // its requester gave up: nobody would own the kernel
		}
	case "exit":
		p.mu.Lock()
		c := p.children[m.PID]
		delete(p.children, m.PID)
		p.mu.Unlock()
		if c != nil {
			var st syscall.WaitStatus
			switch {
			case m.Signal != nil:
				st = syscall.WaitStatus(*m.Signal & 0x7f)
			case m.Code != nil:
				st = syscall.WaitStatus((*m.Code & 0xff) << 8)
			}
			c.end(deadFromExit(st, nil))
		}
	}
}

// endChildren reports every child still listed as ended with the template,
// and fails the fork requests still waiting.
func (p *templateProc) endChildren() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	for pid, c := range p.children {
		c.end(&jupyter.DeadError{Runtime: deadRuntime, Cause: fmt.Sprintf("killed with its kernel template (pid %d)", p.pid), ExitCode: -1, Signal: "SIGKILL"})
		delete(p.children, pid)
	}
	for id, reply := range p.pending {
		reply <- forkResult{err: errors.New("the kernel template ended")}
		delete(p.pending, id)
	}
}

// fork asks the template for a kernel process running the kernel app with
// args, in cwd with env, writing its output to out, held at gate and
// confined by conf when they are not nil, pinned to cpu when it is not
// negative, in the memory group whose cgroup.procs file is charge when it
// is not "". It returns the child once forked.
func (p *templateProc) fork(ctx context.Context, args []string, env map[string]string, cwd string, out, gate *os.File, conf *Confinement, cpu int, charge string) (*forkedChild, error) {
	reply := make(chan forkResult, 1)
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return nil, errors.New("the kernel template ended")
	}
	p.nextID++
	id := p.nextID
	p.pending[id] = reply
	p.mu.Unlock()
	forget := func() {
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
	}
	req := forkRequest{Op: "fork", ID: id, Args: args, Env: env, Cwd: cwd, Charge: charge}
	if cpu >= 0 {
		req.CPU = &cpu
	}
	files := []*os.File{out}
	if gate != nil {
		req.Gate = true
		files = append(files, gate)
	}
	if conf != nil {
		req.Confine = conf.Plan
		files = append(files, conf.Files...)
	}
	data, err := json.Marshal(req)
	if err != nil {
		forget()
		return nil, fmt.Errorf("encode fork request: %w", err)
	}
	ctx, cancel := proc.WithQuietTimeout(ctx, p.pid, p.quiet, 3*p.quiet,
		fmt.Errorf("%w: it answered nothing for %s", errTemplateWedged, p.quiet),
		func() time.Time { return time.Unix(0, p.heard.Load()) })
	defer cancel()
	if err := p.send(ctx, data, files); err != nil {
		forget()
		return nil, err
	}
	select {
	case res := <-reply:
		return res.child, res.err
	case <-ctx.Done():
		forget()
		select { // the reply may have come in the meantime
		case res := <-reply:
			if res.child != nil {
				killOrphan(res.child)
			}
		default:
		}
		return nil, context.Cause(ctx)
	}
}

// errTemplateWedged is the cause of a fork whose template went silent.
var errTemplateWedged = errors.New("the kernel template is wedged")

// killOrphan kills a forked kernel nobody owns (before its setsid too);
// the template reaps it.
func killOrphan(c *forkedChild) {
	proc.SignalGroup(c.pid, syscall.SIGKILL, func() bool { return isClosed(c.exited) }) //nolint:errcheck // gone is fine
}

// send writes one request with files' descriptors attached.
func (p *templateProc) send(ctx context.Context, data []byte, files []*os.File) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	// A template that reads nothing for three silences is wedged, starved
	// or not: its socket's buffer holds many requests.
	deadline, ours := time.Now().Add(3*p.quiet), true
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, ours = d, false
	}
	p.conn.SetWriteDeadline(deadline) //nolint:errcheck // a closed conn fails the write below
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	_, _, err := p.conn.WriteMsgUnix(data, syscall.UnixRights(fds...), nil)
	for _, f := range files {
		runtime.KeepAlive(f)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && ours {
		return fmt.Errorf("send fork request: %w: it read nothing for %s", errTemplateWedged, 3*p.quiet)
	}
	if err != nil {
		return fmt.Errorf("send fork request: %w", err)
	}
	return nil
}

// gone reports whether the template's socket has ended (it exited, or is
// exiting).
func (p *templateProc) gone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended
}

// exitsWithin reports whether the process exits within d.
func (p *templateProc) exitsWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

// live counts the children not reported ended.
func (p *templateProc) live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.children)
}

// stop ends the template: closing the socket makes it kill its children
// and exit; SIGKILL follows after templateStopGrace, or at once with no
// child (one still importing reads its socket only after its imports; a
// fork not yet reported dies with it by PR_SET_PDEATHSIG). It returns once
// every goroutine of p is over.
func (p *templateProc) stop() {
	p.conn.Close()
	if p.live() == 0 {
		syscall.Kill(-p.pid, syscall.SIGKILL) //nolint:errcheck // gone is fine
	}
	t := time.NewTimer(templateStopGrace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		syscall.Kill(-p.pid, syscall.SIGKILL) //nolint:errcheck // gone is fine
	}
	<-p.done
}

// kill ends the template at once (a wedged one).
func (p *templateProc) kill() {
	syscall.Kill(-p.pid, syscall.SIGKILL) //nolint:errcheck // gone is fine
	p.stop()
}
