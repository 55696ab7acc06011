package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

// PoolConfig describes a prewarm pool.
type PoolConfig struct {
	Name   string // for logs and info, e.g. "kernel" or "javascript"
	Size   int    // runtimes kept ready
	Start  func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error)
	Warmup string // code run (silently) in each runtime before it is handed out; "" none
	Prime  bool   // also run primeCode visibly, storing no history (kernels: see warm)
	// WarmupTimeout bounds the warm-up; 60 s when zero.
	WarmupTimeout time.Duration
	// RefillDelay is how long a refill waits after a runtime was taken, so
	// that starting the replacement (a kernel start is about a CPU-second)
	// does not compete with the taker's first execution; 300 ms when zero.
	RefillDelay time.Duration
	// Language and Counter: where takes are counted (PoolTakes, hit or
	// miss); a nil Counter counts nothing.
	Language string
	Counter  jupyter.Counter
	Logger   *slog.Logger
	// Gate, when set, is the start gate a refill waits for, as a session
	// start does: a pool never starts past --max-concurrent-starts.
	Gate *StartGate
}

// Pool keeps Size runtimes started (and warmed up) so that a one-shot call
// or a new session does not wait for a process to start. Take hands one
// out and the pool refills in the background, one start at a time.
//
// A pooled runtime is started with a forwarding handler; Take points it at
// the taker's handler, so messages from before the hand-over (the warm-up's)
// never reach a session.
type Pool struct {
	cfg    PoolConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{} // never closed

	mu    sync.Mutex
	ready []*pooled

	taken, misses, failures atomic.Int64
}

type pooled struct {
	rt  jupyter.Runtime
	fwd *forwarder
}

// forwarder is a jupyter.Handler whose target can be set after the runtime
// started.
type forwarder struct {
	h atomic.Pointer[jupyter.Handler]
}

func (f *forwarder) deliver(m *jupyter.Message) {
	if h := f.h.Load(); h != nil {
		(*h)(m)
	}
}

func (f *forwarder) set(h jupyter.Handler) { f.h.Store(&h) }

// NewPool starts filling a pool; call Close.
func NewPool(cfg PoolConfig) *Pool {
	if cfg.WarmupTimeout <= 0 {
		cfg.WarmupTimeout = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RefillDelay <= 0 {
		cfg.RefillDelay = 300 * time.Millisecond
	}
	p := &Pool{cfg: cfg, wake: make(chan struct{}, 1)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.fill()
	return p
}

// Start is a Backend.Start: a ready runtime from the pool when there is one,
// else a cold start.
func (p *Pool) Start(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
	if pr := p.take(); pr != nil {
		pr.fwd.set(h)
		p.taken.Add(1)
		p.count("hit")
		setStartMode(ctx, StartPool)
		p.poke()
		return pr.rt, nil
	}
	p.misses.Add(1)
	p.count("miss")
	p.poke()
	return p.cfg.Start(ctx, h)
}

func (p *Pool) count(result string) {
	if p.cfg.Counter != nil {
		p.cfg.Counter.Count(PoolTakes, Labels(p.cfg.Language, result), 1)
	}
}

// The modes of a runtime start, as RuntimeStarts and StartSeconds label
// them.
const (
	StartCold = "cold" // a process was started for the caller
	StartPool = "pool" // a ready runtime was taken from a prewarm pool
)

type startModeKey struct{}

// startMode is filled in by whoever starts a runtime under a context made
// by withStartMode.
type startMode struct{ pooled atomic.Bool }

func (m *startMode) mode() string {
	if m.pooled.Load() {
		return StartPool
	}
	return StartCold
}

func withStartMode(ctx context.Context) (context.Context, *startMode) {
	m := &startMode{}
	return context.WithValue(ctx, startModeKey{}, m), m
}

// setStartMode records how the start under ctx was served.
func setStartMode(ctx context.Context, mode string) {
	if m, ok := ctx.Value(startModeKey{}).(*startMode); ok {
		m.pooled.Store(mode == StartPool)
	}
}

func (p *Pool) take() *pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready) > 0 {
		pr := p.ready[0]
		p.ready[0] = nil // the backing array must not keep a taken runtime alive
		p.ready = p.ready[1:]
		select {
		case <-pr.rt.Done(): // died while waiting; the filler replaces it
			continue
		default:
			return pr
		}
	}
	return nil
}

func (p *Pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill keeps the pool at its size until Close.
func (p *Pool) fill() {
	defer p.wg.Done()
	backoff := time.Second
	for {
		p.prune()
		if p.Ready() < p.cfg.Size {
			if err := p.add(); err != nil {
				p.failures.Add(1)
				p.cfg.Logger.Warn("prewarm pool: start failed", "pool", p.cfg.Name, "err", err)
				select {
				case <-p.ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Minute)
			} else {
				backoff = time.Second
			}
			continue
		}
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(p.cfg.RefillDelay):
			}
		case <-time.After(5 * time.Second): // notice runtimes that died while pooled
		}
	}
}

// prune drops pooled runtimes that died.
func (p *Pool) prune() {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.ready[:0]
	for _, pr := range p.ready {
		select {
		case <-pr.rt.Done():
		default:
			live = append(live, pr)
		}
	}
	p.ready = live
}

func (p *Pool) add() error {
	release, err := p.cfg.Gate.Acquire(p.ctx, "pool "+p.cfg.Name)
	if err != nil {
		return err
	}
	fwd := &forwarder{}
	release = sync.OnceFunc(release)
	rt, err := p.cfg.Start(jupyter.WithLaunched(p.ctx, release), fwd.deliver)
	release()
	if err != nil {
		return err
	}
	if p.cfg.Warmup != "" || p.cfg.Prime {
		if err := p.warm(rt, fwd); err != nil {
			closeQuietly(rt)
			return fmt.Errorf("warm up: %w", err)
		}
	}
	p.mu.Lock()
	if p.ctx.Err() != nil {
		p.mu.Unlock()
		closeQuietly(rt)
		return p.ctx.Err()
	}
	p.ready = append(p.ready, &pooled{rt: rt, fwd: fwd})
	p.mu.Unlock()
	return nil
}

// primeCode writes a blank line to stdout and one to stderr and binds no
// name, and its last statement has no value to display. A kernel's first
// visible execution costs several times a later one (display hooks, first
// compile), and so do its first writes to each output stream (the stream's
// buffer, flush and iopub path). Writing to both here, where the forwarder
// drops the output, took about 1 ms off a pooled kernel's first call on the
// 2-core AMD VM: a prewarmed one-shot's p50 was 8.2-9.1 ms (10.2 once)
// against 9.6-10.4 ms with a bare `pass`, in five alternating pairs of
// daemons.
const primeCode = "print()\nprint(file=__import__('sys').stderr)"

// warm runs the warm-up code silently (no execution count, no history),
// then primeCode visibly, storing no history: this moves the cost of the
// first visible execution out of the taker's first call without moving the
// execution count.
func (p *Pool) warm(rt jupyter.Runtime, fwd *forwarder) error {
	if p.cfg.Warmup != "" {
		if err := p.run(rt, fwd, jupyter.ExecuteRequest{Code: p.cfg.Warmup, Silent: true, NoHistory: true}); err != nil {
			return err
		}
	}
	if p.cfg.Prime {
		return p.run(rt, fwd, jupyter.ExecuteRequest{Code: primeCode, NoHistory: true})
	}
	return nil
}

// run executes one request through the forwarder and waits for its idle.
func (p *Pool) run(rt jupyter.Runtime, fwd *forwarder, req jupyter.ExecuteRequest) error {
	id := jupyter.NewID()
	req.MsgID = id
	idle := make(chan struct{})
	var once sync.Once
	fwd.set(func(m *jupyter.Message) {
		if m.Parent.MsgID == id && m.Header.MsgType == jupyter.MsgStatus && jupyter.ExecutionState(m.Content) == jupyter.StateIdle {
			once.Do(func() { close(idle) })
		}
	})
	defer fwd.h.Store(nil)
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.WarmupTimeout)
	defer cancel()
	if err := rt.Execute(ctx, req); err != nil {
		return err
	}
	select {
	case <-idle:
		return nil
	case <-rt.Done():
		return rt.Err()
	case <-ctx.Done():
		return errors.New("no idle before the warm-up deadline")
	}
}

func closeQuietly(rt jupyter.Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = rt.Close(ctx)
}

// Ready is the number of runtimes waiting in the pool.
func (p *Pool) Ready() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// PoolStats is what /v2/code/info reports of a pool.
type PoolStats struct {
	Name     string `json:"name"`
	Size     int    `json:"size"`
	Ready    int    `json:"ready"`
	Warmup   bool   `json:"warmup"`
	Taken    int64  `json:"taken"`
	Misses   int64  `json:"misses"` // calls that found the pool empty and started cold
	Failures int64  `json:"failures"`
}

// Stats reports the pool's size and counters.
func (p *Pool) Stats() PoolStats {
	return PoolStats{Name: p.cfg.Name, Size: p.cfg.Size, Ready: p.Ready(), Warmup: p.cfg.Warmup != "",
		Taken: p.taken.Load(), Misses: p.misses.Load(), Failures: p.failures.Load()}
}

// Close stops refilling and closes every pooled runtime. It waits for a
// start under way until ctx ends, then returns an error saying so.
func (p *Pool) Close(ctx context.Context) error {
	p.cancel() // from here on add closes what it starts instead of keeping it
	filled := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(filled)
	}()
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, pr := range ready {
		wg.Go(func() { _ = pr.rt.Close(ctx) })
	}
	wg.Wait()
	select {
	case <-filled:
		return ctx.Err()
	case <-ctx.Done():
		select {
		case <-filled: // both ready: the filler did end
			return ctx.Err()
		default:
		}
		// A start that ignores its cancelled context must not hold the
		// daemon's shutdown: the filler closes that runtime when it ends.
		return fmt.Errorf("prewarm pool %s: a runtime start under way did not end: %w", p.cfg.Name, context.Cause(ctx))
	}
}
