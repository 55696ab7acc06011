package kernel

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aiod/aiod/kernel/proc"
	"github.com/aiod/aiod/kernel/procmem"
	"github.com/goccy/go-json"
)

// Start modes (TemplateConfig.Mode).
const (
	// StartFork forks kernels of a forkable kernelspec from a warm template
	// process of that spec; other kernelspecs are spawned.
	StartFork = "fork"
	// StartSpawn starts every kernel as a new process from the spec's argv.
	StartSpawn = "spawn"
)

// DefaultPreload is what templates import beyond ipykernel when the daemon
// warms kernels up (--kernel-warmup): the modules analyses use. numpy's
// global generator is reseeded in every child.
var DefaultPreload = []string{"numpy", "pandas", "matplotlib", "matplotlib.pyplot", "matplotlib.backends.backend_agg"}

const (
	// DefaultTemplateReadyTimeout bounds a template's imports.
	DefaultTemplateReadyTimeout = 60 * time.Second
	// templateBackoffMin and templateBackoffMax bound the pause before a
	// failed template is started again.
	templateBackoffMin = time.Second
	templateBackoffMax = 30 * time.Second
	// childFailLimit is how many forked kernels in a row may die before
	// they are ready before the template is taken for broken and restarted.
	childFailLimit = 3
	// firstWait bounds how long a start waits for a template's first
	// imports before it is spawned instead.
	firstWait = 30 * time.Second
	// memEvery is how often Stats reads the template's memory.
	memEvery = time.Second
	// goneGrace is how long a failed start waits to learn whether the
	// template died (its death is then reported once, by the supervisor).
	goneGrace = 100 * time.Millisecond
)

// TemplateConfig configures Templates.
type TemplateConfig struct {
	// Mode is StartFork (the default when empty) or StartSpawn.
	Mode string
	// Preload names the modules a template imports besides ipykernel and
	// IPython, e.g. DefaultPreload. A module that fails to import is
	// skipped and reported in TemplateStats.PreloadFailed.
	Preload []string
	// ReadyTimeout bounds a template's start up to its imports being done (3
	// times it while it waits for a CPU); zero: DefaultTemplateReadyTimeout.
	ReadyTimeout time.Duration
	// Logger receives the template's life (starts, failures, restarts) and,
	// at debug level, its output. Nil discards.
	Logger *slog.Logger
	// Environ is the base of the template's environment (what its kernels'
	// /proc/self/environ shows); nil means aiod's own. Kernels forked from
	// it should have the same Options.Environ.
	Environ []string
	// Credential, when set, runs templates, and so every kernel forked
	// from them, as that user.
	Credential *syscall.Credential
	// Confine, when set, is the Python source of aiod's sandbox applier
	// (a module defining confine(plan, fds)): the template (root) applies
	// Setup to itself before it imports anything, and each fork request
	// that carries a plan (Options.Confine) is applied in the child before
	// the kernel app exists.
	Confine string
	Setup   json.RawMessage
	// ChargeHome: the cgroup.procs of the template's memory group, where it
	// returns after each fork charged to a kernel (Options.Charge). Its
	// kernels then have an OOM score of 1000, so that the OOM killer picks
	// one of them, not the template forking in their group.
	ChargeHome string
	NoHotPages bool // pin no hot pages (template.py): forks could not be charged to their kernels

	replyTimeout time.Duration // forkReplyTimeout unless a test sets it
}

// Templates keeps one template process per forkable kernelspec, started on
// first use (or by Prepare) and restarted in the background when it fails.
// Give it to Start in Options.Templates. The zero value is not usable; a nil
// *Templates spawns every kernel. Methods are safe for concurrent use.
type Templates struct {
	cfg  TemplateConfig
	log  *slog.Logger
	pins *proc.Pins // one CPU for each forked kernel's start-up; nil on one CPU

	mu     sync.Mutex
	byKey  map[string]*Template // guarded by mu
	order  []*Template          // guarded by mu; creation order, for Stats
	closed bool                 // guarded by mu
}

// NewTemplates returns a template set; nothing starts before Prepare or the
// first Start of a forkable kernelspec. It fails on an unknown mode.
func NewTemplates(cfg TemplateConfig) (*Templates, error) {
	switch cfg.Mode {
	case "":
		cfg.Mode = StartFork
	case StartFork, StartSpawn:
	default:
		return nil, fmt.Errorf("kernel start mode %q: want %s or %s", cfg.Mode, StartFork, StartSpawn)
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultTemplateReadyTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Templates{cfg: cfg, log: cfg.Logger, byKey: map[string]*Template{}, pins: proc.NewPins()}, nil
}

// Mode returns StartFork or StartSpawn; a nil *Templates spawns.
func (ts *Templates) Mode() string {
	if ts == nil {
		return StartSpawn
	}
	return ts.cfg.Mode
}

// Forkable reports whether kernels of spec can be forked from a template:
// nil when its argv is the standard ipykernel launcher,
// "INTERPRETER -m ipykernel_launcher -f {connection_file}" (or "-m
// ipykernel"), with nothing else but --Option=value arguments; otherwise an
// error saying why the spec is spawned.
func Forkable(spec *Spec) error {
	a := spec.Argv
	if len(a) < 5 || a[1] != "-m" || (a[2] != "ipykernel_launcher" && a[2] != "ipykernel") {
		return fmt.Errorf("kernelspec %s: argv %q is not INTERPRETER -m ipykernel_launcher -f {connection_file}", spec.Name, a)
	}
	conn := false
	for i := 3; i < len(a); i++ {
		switch {
		case a[i] == "-f" && i+1 < len(a) && a[i+1] == "{connection_file}" && !conn:
			conn = true
			i++
		case strings.HasPrefix(a[i], "--") && !strings.Contains(a[i], "{"):
		default:
			return fmt.Errorf("kernelspec %s: argv %q has an argument the template cannot pass on: %q", spec.Name, a, a[i])
		}
	}
	if !conn {
		return fmt.Errorf("kernelspec %s: argv %q has no -f {connection_file}", spec.Name, a)
	}
	return nil
}

// Prepare starts spec's template now, so that the first kernel does not
// wait for its imports. It does nothing in spawn mode, for a kernelspec
// that is not forkable, or after Close.
func (ts *Templates) Prepare(spec *Spec) {
	ts.template(spec)
}

// AwaitFirst starts spec's template (as Prepare) and waits, within ctx,
// until its first process is ready or has failed; at once when spec's
// kernels are spawned.
func (ts *Templates) AwaitFirst(ctx context.Context, spec *Spec) error {
	t := ts.template(spec)
	if t == nil {
		return nil
	}
	select {
	case <-t.first:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// template returns spec's template, creating (and starting) it on first
// use; nil when spec's kernels are spawned.
func (ts *Templates) template(spec *Spec) *Template {
	if ts == nil || ts.cfg.Mode != StartFork || spec == nil || Forkable(spec) != nil {
		return nil
	}
	key := templateKey(spec)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return nil
	}
	if t := ts.byKey[key]; t != nil {
		return t
	}
	t := newTemplate(ts, spec)
	ts.byKey[key] = t
	ts.order = append(ts.order, t)
	return t
}

// templateKey tells specs apart by what the template process depends on:
// the folder, argv and env (a copy of a spec with other env is another
// template).
func templateKey(spec *Spec) string {
	var b strings.Builder
	b.WriteString(spec.Dir)
	for _, a := range spec.Argv {
		b.WriteString("\x00" + a)
	}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString("\x01" + k + "=" + spec.Env[k])
	}
	return b.String()
}

// Close stops every template; their kernels die with them. Kernels should
// be closed first. Close waits for the processes to be gone, or until ctx
// ends (they are then killed), and is idempotent.
func (ts *Templates) Close(ctx context.Context) error {
	if ts == nil {
		return nil
	}
	ts.mu.Lock()
	ts.closed = true
	all := slices.Clone(ts.order)
	ts.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range all {
		wg.Go(func() { t.close(ctx) })
	}
	wg.Wait()
	return nil
}

// TemplateStats describes one template, for the discovery routes.
type TemplateStats struct {
	Kernelspec string `json:"kernelspec"`
	// State is "starting" (importing, the first time), "ready",
	// "restarting" (it failed; kernels are spawned meanwhile) or "closed".
	State string `json:"state"`
	// PID is the template process, 0 while none runs.
	PID int `json:"pid"`
	// RSSBytes and PSSBytes are the template's resident and proportional
	// memory (/proc/PID/smaps_rollup); 0 while none runs.
	RSSBytes int64 `json:"rss_bytes"`
	PSSBytes int64 `json:"pss_bytes"`
	// Starts counts the kernels forked; Fallbacks the starts spawned
	// instead because the template could not serve them; Restarts the
	// template processes started after the first.
	Starts    uint64 `json:"starts"`
	Fallbacks uint64 `json:"fallbacks"`
	Restarts  uint64 `json:"restarts"`
	// LiveKernels counts the forked kernels running now.
	LiveKernels int `json:"live_kernels"`
	// ReadySeconds is how long the running template took to import.
	ReadySeconds float64 `json:"ready_seconds"`
	// Python and IPyKernel are the running template's versions.
	Python    string `json:"python,omitempty"`
	IPyKernel string `json:"ipykernel,omitempty"`
	// PreloadFailed maps the preloaded modules that failed to import to
	// their error.
	PreloadFailed map[string]string `json:"preload_failed,omitempty"`
	// LastError says why the template last failed, if it ever did.
	LastError string `json:"last_error,omitempty"`
	// HotPages counts the template's pages that a fork copies at once
	// (docs/kernels.md); HotError says why there are none.
	HotPages int    `json:"hot_pages"`
	HotError string `json:"hot_error,omitempty"`
}

// Stats describes every template, in the order they were created.
func (ts *Templates) Stats() []TemplateStats {
	if ts == nil {
		return nil
	}
	ts.mu.Lock()
	all := slices.Clone(ts.order)
	ts.mu.Unlock()
	out := make([]TemplateStats, 0, len(all))
	for _, t := range all {
		out = append(out, t.Stats())
	}
	return out
}

// Template is the template process of one kernelspec, kept running by its
// supervisor goroutine. See Templates.
type Template struct {
	ts   *Templates
	spec *Spec
	log  *slog.Logger

	starts, fallbacks, restarts atomic.Uint64

	mu         sync.Mutex
	cur        *templateProc // guarded by mu; the process serving forks, nil while none is ready
	state      string        // guarded by mu
	lastErr    string        // guarded by mu
	logged     bool          // guarded by mu; the current failure has been logged
	childFails int           // guarded by mu; forked kernels in a row that died before ready
	first      chan struct{} // closed when the first process is ready or has failed
	served     chan struct{} // guarded by mu; closed, and made anew, each time a process starts serving forks

	memMu          sync.Mutex
	memAt          time.Time // guarded by memMu: when memPID's memory was read
	memPID         int       // guarded by memMu
	memRSS, memPSS int64     // guarded by memMu

	stopCtx context.Context    // ends at close
	stop    context.CancelFunc // called by close
	done    chan struct{}      // closed when the supervisor is over
}

func newTemplate(ts *Templates, spec *Spec) *Template {
	t := &Template{
		ts: ts, spec: spec, log: ts.log.With("kernel_template", spec.Name),
		state: "starting", first: make(chan struct{}), served: make(chan struct{}), done: make(chan struct{}),
	}
	t.stopCtx, t.stop = context.WithCancel(context.Background())
	go t.supervise()
	return t
}

// supervise starts the template process, and again each time it ends,
// with a growing pause, until close.
func (t *Template) supervise() {
	defer close(t.done)
	backoff := templateBackoffMin
	for n := 0; ; n++ {
		if n > 0 {
			t.restarts.Add(1)
		}
		start := time.Now()
		p, err := launchTemplate(t.stopCtx, t.spec, t.ts.cfg, t.log)
		if err == nil {
			t.serve(p, start)
			select {
			case <-p.exited:
			case <-t.stopCtx.Done():
				p.stop()
				return
			}
			<-p.done
			err = fmt.Errorf("kernel template (pid %d) %w", p.pid, p.exitErr)
			if out := p.output.String(); out != "" {
				err = fmt.Errorf("%w: %s", err, lastLine(out))
			}
			if time.Since(start) > 2*templateBackoffMax {
				backoff = templateBackoffMin // it was healthy for a while
			}
		}
		if t.stopCtx.Err() != nil {
			return
		}
		t.down(err)
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-t.stopCtx.Done():
			timer.Stop()
			return
		}
		backoff = min(2*backoff, templateBackoffMax)
	}
}

// serve makes p the process that serves forks.
func (t *Template) serve(p *templateProc, start time.Time) {
	t.mu.Lock()
	t.cur, t.state, t.logged, t.childFails = p, "ready", false, 0
	served := t.served
	t.served = make(chan struct{})
	t.mu.Unlock()
	close(served)
	t.closeFirst()
	t.log.Info("kernel template ready", "pid", p.pid, "imports", time.Since(start).Round(time.Millisecond),
		"python", p.info.Python, "ipykernel", p.info.IPyKernel, "preload_failed", len(p.info.Failed))
	for m, e := range p.info.Failed {
		t.log.Warn("kernel template could not preload a module", "module", m, "err", e)
	}
}

// down records that no process serves forks, and why; the first report
// of each failure is logged.
func (t *Template) down(err error) {
	t.mu.Lock()
	t.cur, t.state, t.lastErr = nil, "restarting", err.Error()
	first := !t.logged
	t.logged = true
	t.mu.Unlock()
	t.closeFirst()
	if first {
		t.log.Warn("kernel template failed; new kernels are spawned until it is back, restarting it", "err", err)
	}
}

func (t *Template) closeFirst() {
	select {
	case <-t.first:
	default:
		close(t.first)
	}
}

// fail records a failure of the running process p that the supervisor does
// not see (a fork that failed, a child that died early), logging it once.
// With restart, p is killed and the supervisor starts another. A p that has
// ended is the supervisor's to report and restart.
func (t *Template) fail(p *templateProc, err error, restart bool) {
	if p.gone() || p.exitsWithin(goneGrace) {
		return
	}
	t.mu.Lock()
	if t.cur == p {
		t.lastErr = err.Error()
	}
	first := !t.logged
	t.logged = true
	t.mu.Unlock()
	if first {
		t.log.Warn("kernel template could not start a kernel; spawning it instead", "err", err, "restart_template", restart)
	}
	if restart {
		go p.kill()
	}
}

// process returns the process that serves forks: at once when one is
// ready, after waiting for the first one's imports when it is still
// starting, nil when the template failed (the caller spawns).
func (t *Template) process(ctx context.Context) *templateProc {
	t.mu.Lock()
	p, state := t.cur, t.state
	t.mu.Unlock()
	if p != nil || state != "starting" {
		return p
	}
	timer := time.NewTimer(firstWait)
	defer timer.Stop()
	select {
	case <-t.first:
	case <-ctx.Done():
		return nil
	case <-timer.C:
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur
}

// childStarted and childFailed track forked kernels that reached (or did
// not reach) readiness: childFailLimit failures in a row restart p.
func (t *Template) childStarted() {
	t.mu.Lock()
	t.childFails = 0
	t.mu.Unlock()
}

func (t *Template) childFailed(p *templateProc, err error) {
	t.mu.Lock()
	t.childFails++
	restart := t.childFails >= childFailLimit && t.cur == p
	if restart {
		t.childFails = 0
	}
	t.mu.Unlock()
	t.fail(p, fmt.Errorf("forked kernel died before it was ready: %w", err), restart)
}

// close stops the supervisor and the process, bounded by ctx.
func (t *Template) close(ctx context.Context) {
	t.stop()
	select {
	case <-t.done:
	case <-ctx.Done():
		t.mu.Lock()
		p := t.cur
		t.mu.Unlock()
		if p != nil {
			p.kill()
		}
		<-t.done
	}
	t.mu.Lock()
	t.cur, t.state = nil, "closed"
	t.mu.Unlock()
}

// Stats describes the template now.
func (t *Template) Stats() TemplateStats {
	t.mu.Lock()
	p, state, lastErr := t.cur, t.state, t.lastErr
	t.mu.Unlock()
	s := TemplateStats{
		Kernelspec: t.spec.Name, State: state, LastError: lastErr,
		Starts: t.starts.Load(), Fallbacks: t.fallbacks.Load(), Restarts: t.restarts.Load(),
	}
	if p != nil {
		s.PID, s.LiveKernels = p.pid, p.live()
		s.ReadySeconds, s.Python, s.IPyKernel, s.PreloadFailed = p.info.Seconds, p.info.Python, p.info.IPyKernel, p.info.Failed
		s.RSSBytes, s.PSSBytes = t.memory(p.pid)
		p.mu.Lock()
		s.HotPages, s.HotError = p.hot.Pages, p.hot.Error
		p.mu.Unlock()
	}
	return s
}

// memory returns pid's RSS and PSS, read at most once per memEvery
// (discovery routes may be polled often, and smaps_rollup walks every
// mapping).
func (t *Template) memory(pid int) (rss, pss int64) {
	t.memMu.Lock()
	defer t.memMu.Unlock()
	if pid != t.memPID || time.Since(t.memAt) > memEvery {
		t.memRSS, t.memPSS = procmem.Rollup(pid)
		t.memPID, t.memAt = pid, time.Now()
	}
	return t.memRSS, t.memPSS
}
