package backend

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend/sandbox"
)

// Under tenant isolation a runtime is confined before it runs anything, so
// a pooled one must already be in its tenant's sandbox: each tenant that
// starts runtimes gets pools of its own (--kernel-prewarm kernels,
// --code-prewarm native REPLs per language), made on its first start and
// closed once it has started nothing for tenantPoolIdle. A tenant's first
// session is therefore a cold start; the next ones take a ready runtime.

// tenantPoolIdle is how long a tenant's pools outlive its last start.
const tenantPoolIdle = 5 * time.Minute

// tenantPools are the pools of every tenant.
type tenantPools struct {
	mu     sync.Mutex
	byKey  map[string]*tenantPool // guarded by mu
	closed bool                   // guarded by mu
	stop   chan struct{}          // closed by close: ends the janitor
	done   chan struct{}          // closed when the janitor is over
}

// tenantPool is one tenant's pools; nil members are off.
type tenantPool struct {
	kernel *stream.Pool
	native map[string]*stream.Pool
	last   time.Time // guarded by tenantPools.mu: the tenant's last start
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
	tp := &tenantPools{byKey: map[string]*tenantPool{}, stop: make(chan struct{}), done: make(chan struct{})}
	r.tpools = tp
	go func() {
		defer close(tp.done)
		t := time.NewTicker(tenantPoolIdle / 10)
		defer t.Stop()
		for {
			select {
			case <-tp.stop:
				return
			case <-t.C:
				tp.closeIdle(time.Now())
			}
		}
	}()
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
	p := &tenantPool{native: map[string]*stream.Pool{}, last: time.Now()}
	env := r.env
	if n := r.cfg.KernelPrewarm; n > 0 && env.PythonKernel != nil {
		warm := kernelWarmup
		if r.cfg.NoKernelWarmup {
			warm = ""
		}
		p.kernel = stream.NewPool(stream.PoolConfig{
			Name: "kernel", Size: n, Start: r.coldKernelBackend(env.PythonKernel.spec, nil, t).Start,
			Warmup: warm, Prime: true, Language: Python, Counter: r.cfg.Counter, Logger: r.log.With("tenant", t.Key),
		})
	}
	if n := r.cfg.CodePrewarm; n > 0 {
		if env.Node.Error == "" {
			p.native[JS] = stream.NewPool(stream.PoolConfig{Name: JS, Size: n, Start: r.coldNativeBackend(JS, env.Node.Path, nil, t).Start,
				Language: JS, Counter: r.cfg.Counter, Logger: r.log.With("tenant", t.Key)})
		}
		if env.PythonBackend == Native && env.Python.Error == "" {
			p.native[Python] = stream.NewPool(stream.PoolConfig{Name: Python, Size: n, Start: r.coldNativeBackend(Python, env.Python.Path, nil, t).Start,
				Language: Python, Counter: r.cfg.Counter, Logger: r.log.With("tenant", t.Key)})
		}
	}
	tps.byKey[t.Key] = p
	return p
}

// closeIdle closes the pools of tenants that started nothing since
// now - tenantPoolIdle.
func (tps *tenantPools) closeIdle(now time.Time) {
	tps.mu.Lock()
	var idle []*stream.Pool
	for k, p := range tps.byKey {
		if now.Sub(p.last) > tenantPoolIdle {
			idle = append(idle, p.all()...)
			delete(tps.byKey, k)
		}
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
	for k, p := range tps.byKey {
		if only != "" && k != only {
			continue
		}
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
