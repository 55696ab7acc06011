package backend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend/sandbox"
)

// Under tenant isolation a runtime is confined before it runs anything (a
// kernel cannot enter a tenant's mount and user namespaces once ipykernel
// has threads), so a pooled one must already be in its tenant's sandbox:
// each tenant that starts runtimes gets pools of its own (--kernel-prewarm
// kernels, --code-prewarm native REPLs per language), made on its first
// start and closed once it has started nothing for tenantPoolIdle, or when
// more than maxTenantPools tenants hold pools and its last start is the
// oldest.
//
// A tenant's first session takes a ready runtime too: when callers are
// told apart by JWT (KeepSpare), sandbox.Tenants keeps a spare sandbox
// made ahead, and this package the same pools in it. The first tenant
// aiod has no folder of adopts the spare (sandbox/spare.go) and its pools
// become that tenant's; the janitor then makes the next spare, whose pools
// fill under the start gate like any refill. A pool's start function reads
// its sandbox through a tenantRef, which adoption points at the tenant, so
// that later refills start in the tenant's folders. Without credentials
// the one tenant's pools fill at start instead (PrewarmTenant), and so do
// the API token's tenant's.

// tenantPoolIdle is how long a tenant's pools outlive its last start.
const tenantPoolIdle = 5 * time.Minute

// maxTenantPools is how many tenants hold pools at once: past it, the
// pools of the tenant whose last start is oldest are closed, so that the
// kernels kept ready stay bounded however many callers come (2 kernels
// of about 25 MB each per tenant by default: 400 MB at most, and 50 MB
// more in the spare).
const maxTenantPools = 8

// tenantPools are the pools of every tenant.
//
// Lock order: sandbox.Tenants' lock, then mu (the spare's callbacks run
// under the first and take the second); nothing holding mu calls Tenants.
type tenantPools struct {
	mu        sync.Mutex
	byKey     map[string]*tenantPool // guarded by mu
	closed    bool                   // guarded by mu
	wantSpare bool                   // guarded by mu: KeepSpare was called
	spare     *tenantPool            // guarded by mu: the pools in the spare sandbox; nil: none
	stop      chan struct{}          // closed by close: ends the janitor
	evict     chan struct{}          // pokes the janitor: more than maxTenantPools
	respare   chan struct{}          // pokes the janitor: make a spare
	done      chan struct{}          // closed when the janitor is over
}

// tenantPool is one tenant's pools; nil members are off.
type tenantPool struct {
	kernel *stream.Pool
	native map[string]*stream.Pool
	last   time.Time // guarded by tenantPools.mu: the tenant's last start
	in     *tenantRef
}

// tenantRef is the sandbox a tenant's pools start runtimes in: the spare's
// until a tenant adopts it, then that tenant's.
type tenantRef struct{ atomic.Pointer[sandbox.Tenant] }

func refTo(t *sandbox.Tenant) *tenantRef {
	ref := &tenantRef{}
	ref.Store(t)
	return ref
}

func (tp *tenantPool) all() []*stream.Pool {
	out := []*stream.Pool{}
	if tp.kernel != nil {
		out = append(out, tp.kernel)
	}
	for _, p := range tp.native {
		out = append(out, p)
	}
	return out
}

// startTenantPools starts the janitor that closes idle tenants' pools;
// nothing when no pool is asked for.
func (r *Runtimes) startTenantPools() {
	if r.cfg.KernelPrewarm == 0 && r.cfg.CodePrewarm == 0 {
		return
	}
	tp := &tenantPools{byKey: map[string]*tenantPool{}, stop: make(chan struct{}), evict: make(chan struct{}, 1),
		respare: make(chan struct{}, 1), done: make(chan struct{})}
	r.tpools = tp
	if ts := r.iso.Tenants(); ts != nil {
		ts.OnAdopt(tp.adopted)
	}
	go func() {
		defer close(tp.done)
		t := time.NewTicker(tenantPoolIdle / 10)
		defer t.Stop()
		var respare <-chan time.Time
		for {
			select {
			case <-tp.stop:
				return
			case <-t.C:
				r.makeSpare() // retries one that failed
			case <-tp.evict:
			case <-tp.respare:
				// Later, as a pool's refill: the sandbox and the first
				// start of its pools would compete with the adopter's
				// first execution.
				respare = time.After(spareDelay)
				continue
			case <-respare:
				respare = nil
				r.makeSpare()
				continue
			}
			tp.closeIdle(time.Now())
		}
	}()
}

// spareDelay is how long after an adoption the next spare is made.
const spareDelay = 300 * time.Millisecond

// KeepSpare keeps a spare sandbox with pools ready for the next tenant
// aiod has never seen: for daemons whose callers are told apart (JWT
// subjects). Nothing without tenant isolation or pools.
func (r *Runtimes) KeepSpare() {
	tps := r.tpools
	if tps == nil || r.iso.Tenants() == nil {
		return
	}
	tps.mu.Lock()
	tps.wantSpare = true
	tps.mu.Unlock()
	tps.poke(tps.respare)
}

func (tps *tenantPools) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// makeSpare makes the spare sandbox and its pools when they are wanted and
// missing (the janitor's).
func (r *Runtimes) makeSpare() {
	tps := r.tpools
	tps.mu.Lock()
	want := tps.wantSpare && tps.spare == nil && !tps.closed
	tps.mu.Unlock()
	if !want {
		return
	}
	_, err := r.iso.Tenants().MakeSpare(func(sp *sandbox.Tenant) {
		tps.mu.Lock()
		defer tps.mu.Unlock()
		if !tps.closed && tps.spare == nil {
			tps.spare = r.newTenantPool(refTo(sp))
		}
	})
	if err != nil {
		r.log.Warn("no spare sandbox: a new tenant's first runtime starts cold", "err", err)
	}
}

// adopted makes the spare's pools tenant t's (sandbox.Tenants.OnAdopt's f:
// under its lock) and asks the janitor for the next spare.
func (tps *tenantPools) adopted(spare, t *sandbox.Tenant) {
	tps.mu.Lock()
	defer tps.mu.Unlock()
	p := tps.spare
	if p == nil || p.in.Load() != spare || tps.closed {
		return
	}
	tps.spare = nil
	p.in.Store(t)
	p.last = time.Now()
	tps.byKey[t.Key] = p // t is new: it had no pools
	if len(tps.byKey) > maxTenantPools {
		tps.poke(tps.evict)
	}
	tps.poke(tps.respare)
}

// tenantPool returns t's pools, making them on first use; nil when pools
// are off or aiod is closing.
func (r *Runtimes) tenantPool(t *sandbox.Tenant) *tenantPool {
	tps := r.tpools
	if tps == nil {
		return nil
	}
	tps.mu.Lock()
	defer tps.mu.Unlock()
	if tps.closed {
		return nil
	}
	if p := tps.byKey[t.Key]; p != nil {
		p.last = time.Now()
		return p
	}
	p := r.newTenantPool(refTo(t))
	tps.byKey[t.Key] = p
	if len(tps.byKey) > maxTenantPools {
		tps.poke(tps.evict)
	}
	return p
}

// newTenantPool starts filling the pools of the sandbox in.
func (r *Runtimes) newTenantPool(in *tenantRef) *tenantPool {
	p := &tenantPool{native: map[string]*stream.Pool{}, last: time.Now(), in: in}
	env := r.env
	log := r.log.With("tenant", in.Load().Key) // a spare's pools keep its name in their logs
	if n := r.cfg.KernelPrewarm; n > 0 && env.PythonKernel != nil {
		warm := kernelWarmup
		if r.cfg.NoKernelWarmup {
			warm = ""
		}
		spec := env.PythonKernel.spec
		p.kernel = stream.NewPool(stream.PoolConfig{
			Name: "kernel", Size: n, Start: startInRef(in, func(t *sandbox.Tenant) stream.Backend { return r.coldKernelBackend(spec, nil, t) }),
			Warmup: warm, Prime: true, Language: Python, Counter: r.cfg.Counter, Gate: r.cfg.StartGate, Logger: log,
		})
	}
	if n := r.cfg.CodePrewarm; n > 0 {
		native := func(lang, path string) *stream.Pool {
			return stream.NewPool(stream.PoolConfig{Name: lang, Size: n,
				Start:    startInRef(in, func(t *sandbox.Tenant) stream.Backend { return r.coldNativeBackend(lang, path, nil, t) }),
				Language: lang, Counter: r.cfg.Counter, Gate: r.cfg.StartGate, Logger: log})
		}
		if env.Node.Error == "" {
			p.native[JS] = native(JS, env.Node.Path)
		}
		if env.PythonBackend == Native && env.Python.Error == "" {
			p.native[Python] = native(Python, env.Python.Path)
		}
	}
	return p
}

// startInRef is a pool's start function: a cold start in the sandbox in
// holds now. A start that failed while the spare it began in was adopted
// (its folders were renamed under it) is made again in the adopter's.
func startInRef(in *tenantRef, cold func(*sandbox.Tenant) stream.Backend) func(context.Context, jupyter.Handler) (jupyter.Runtime, error) {
	return func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
		t := in.Load()
		rt, err := cold(t).Start(ctx, h)
		if now := in.Load(); err != nil && now != t && ctx.Err() == nil {
			return cold(now).Start(ctx, h)
		}
		return rt, err
	}
}

// closeIdle closes the pools of tenants that started nothing since
// now - tenantPoolIdle, and those of the least recent tenants past
// maxTenantPools.
func (tps *tenantPools) closeIdle(now time.Time) {
	tps.mu.Lock()
	var idle []*stream.Pool
	for k, p := range tps.byKey {
		if now.Sub(p.last) > tenantPoolIdle {
			idle = append(idle, p.all()...)
			delete(tps.byKey, k)
		}
	}
	for len(tps.byKey) > maxTenantPools {
		oldest := ""
		for k, p := range tps.byKey {
			if oldest == "" || p.last.Before(tps.byKey[oldest].last) {
				oldest = k
			}
		}
		idle = append(idle, tps.byKey[oldest].all()...)
		delete(tps.byKey, oldest)
	}
	tps.mu.Unlock()
	closePools(idle)
}

// stats sums every tenant's pools by name (or reports one tenant's).
func (tps *tenantPools) stats(only string) map[string]stream.PoolStats {
	out := map[string]stream.PoolStats{}
	if tps == nil {
		return out
	}
	tps.mu.Lock()
	defer tps.mu.Unlock()
	all := map[string]*tenantPool{}
	for k, p := range tps.byKey {
		if only == "" || k == only {
			all[k] = p
		}
	}
	if only == "" && tps.spare != nil {
		all[sandbox.SpareKey] = tps.spare
	}
	for _, p := range all {
		for _, pool := range p.all() {
			s := pool.Stats()
			acc := out[s.Name]
			acc.Name, acc.Warmup = s.Name, s.Warmup
			acc.Size += s.Size
			acc.Ready += s.Ready
			acc.Taken += s.Taken
			acc.Misses += s.Misses
			acc.Failures += s.Failures
			out[s.Name] = acc
		}
	}
	return out
}

// close closes every tenant's pools and ends the janitor.
func (tps *tenantPools) close(ctx context.Context) error {
	if tps == nil {
		return nil
	}
	tps.mu.Lock()
	tps.closed = true
	var all []*stream.Pool
	for _, p := range tps.byKey {
		all = append(all, p.all()...)
	}
	if tps.spare != nil {
		all = append(all, tps.spare.all()...)
		tps.spare = nil
	}
	tps.byKey = map[string]*tenantPool{}
	tps.mu.Unlock()
	close(tps.stop)
	<-tps.done
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() {
			err := p.Close(ctx)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func closePools(ps []*stream.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { _ = p.Close(ctx) })
	}
	wg.Wait()
}

// PrewarmTenant makes tenant's pools now, so that its first runtime is a
// warm one: for the one tenant every caller is when credentials tell no
// callers apart. Nothing without tenant isolation or pools.
func (r *Runtimes) PrewarmTenant(tenant string) error {
	if r.tpools == nil {
		return nil
	}
	t, err := r.iso.Tenant(tenant)
	if err != nil || t == nil {
		return err
	}
	r.tenantPool(t)
	return nil
}
