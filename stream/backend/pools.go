package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/aiod/aiod/kernel"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend/isolate"
	"github.com/aiod/aiod/stream/backend/sandbox"
)

// kernelWarmup imports what the page's analyses use, without binding any
// name in the user's namespace, so that the first real call does not pay
// for it. The backend is left as ipykernel set it (inline); the Agg module
// is imported too because savefig and the walkthrough use it.
const kernelWarmup = `for _aiod_m in ("pandas", "matplotlib", "matplotlib.pyplot", "matplotlib.backends.backend_agg"):
    try:
        __import__(_aiod_m)
    except Exception:
        pass
del _aiod_m`

// pools are the prewarm pools; nil members are off. templates are the
// kernel templates kernels are forked from (spawn mode: none).
type pools struct {
	kernel    *stream.Pool
	native    map[string]*stream.Pool // by language
	templates *kernel.Templates
}

// validKernelStart checks the kernel start mode and transport settings.
func validKernelStart(cfg Config) error {
	if _, err := kernel.NewTemplates(kernel.TemplateConfig{Mode: cfg.KernelStart}); err != nil {
		return err
	}
	switch cfg.KernelTransport {
	case "", kernel.TransportIPC, kernel.TransportTCP:
		return nil
	}
	return fmt.Errorf("kernel transport %q: want ipc or tcp", cfg.KernelTransport)
}

// startPools makes the kernel templates and starts filling the pools. Its
// error (a bad start mode, which New validated first) comes before
// anything is started.
func (r *Runtimes) startPools() error {
	env := r.env
	preload := kernel.DefaultPreload
	if r.cfg.NoKernelWarmup {
		preload = nil
	}
	tc := kernel.TemplateConfig{Mode: r.cfg.KernelStart, Preload: preload, Logger: r.log,
		Environ: r.base, Credential: r.iso.Credential(), ChargeHome: r.iso.ChargeHome(), NoHotPages: r.iso.MemoryUncharged()}
	if r.iso.Mode() == isolate.ModeTenant {
		tc.Confine, tc.Setup = sandbox.ConfinePy, sandbox.TemplatePlan(sandbox.HomePath).JSON()
	}
	ts, err := kernel.NewTemplates(tc)
	if err != nil {
		return err
	}
	r.pools.templates = ts
	if env.PythonKernel != nil && env.PythonBackend == Kernel {
		r.pools.templates.Prepare(env.PythonKernel.spec) // warm before the first session
	}
	if r.iso.Mode() == isolate.ModeTenant {
		r.startTenantPools() // a pooled runtime must start in its tenant's sandbox
		return nil
	}
	if n := r.cfg.KernelPrewarm; n > 0 && env.PythonKernel != nil {
		warm := kernelWarmup
		if r.cfg.NoKernelWarmup {
			warm = ""
		}
		r.pools.kernel = stream.NewPool(stream.PoolConfig{
			Name: "kernel", Size: n, Start: r.coldKernelBackend(env.PythonKernel.spec, nil, nil).Start,
			Warmup: warm, Prime: true, Language: Python, Counter: r.cfg.Counter, Gate: r.cfg.StartGate, Logger: r.log,
		})
	}
	if n := r.cfg.CodePrewarm; n > 0 {
		r.pools.native = map[string]*stream.Pool{}
		if env.Node.Error == "" {
			r.pools.native[JS] = stream.NewPool(stream.PoolConfig{
				Name: JS, Size: n, Start: r.coldNativeBackend(JS, env.Node.Path, nil, nil).Start, Language: JS, Counter: r.cfg.Counter, Gate: r.cfg.StartGate, Logger: r.log,
			})
		}
		if env.PythonBackend == Native && env.Python.Error == "" {
			r.pools.native[Python] = stream.NewPool(stream.PoolConfig{
				Name: Python, Size: n, Start: r.coldNativeBackend(Python, env.Python.Path, nil, nil).Start, Language: Python, Counter: r.cfg.Counter, Gate: r.cfg.StartGate, Logger: r.log,
			})
		}
	}
	return nil
}

// stats reports every pool, including those that are off (size 0).
func (p *pools) stats(cfg Config) map[string]stream.PoolStats {
	out := map[string]stream.PoolStats{
		"kernel": {Name: "kernel", Warmup: !cfg.NoKernelWarmup},
		JS:       {Name: JS},
		Python:   {Name: Python},
	}
	if p.kernel != nil {
		out["kernel"] = p.kernel.Stats()
	}
	for lang, np := range p.native {
		out[lang] = np.Stats()
	}
	return out
}

func (p *pools) close(ctx context.Context) error {
	var errs []error
	if p.kernel != nil {
		errs = append(errs, p.kernel.Close(ctx))
	}
	for _, np := range p.native {
		errs = append(errs, np.Close(ctx))
	}
	errs = append(errs, p.templates.Close(ctx)) // after every kernel: forked ones die with it
	return errors.Join(errs...)
}
