package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/aiod/aiod/kernel"
	"github.com/aiod/aiod/stream"
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

func (s *Server) startPools() {
	env := s.env
	preload := kernel.DefaultPreload
	if s.cfg.NoKernelWarmup {
		preload = nil
	}
	s.pools.templates, _ = kernel.NewTemplates(kernel.TemplateConfig{Mode: s.cfg.KernelStart, Preload: preload, Logger: s.log})
	if env.PythonKernel != nil && env.PythonBackend == "kernel" {
		s.pools.templates.Prepare(env.PythonKernel.spec) // warm before the first session
	}
	if n := s.cfg.KernelPrewarm; n > 0 && env.PythonKernel != nil {
		warm := kernelWarmup
		if s.cfg.NoKernelWarmup {
			warm = ""
		}
		s.pools.kernel = stream.NewPool(stream.PoolConfig{
			Name: "kernel", Size: n, Start: s.coldKernelBackend(env.PythonKernel.spec).Start,
			Warmup: warm, Prime: true, Logger: s.log,
		})
	}
	if n := s.cfg.CodePrewarm; n > 0 {
		s.pools.native = map[string]*stream.Pool{}
		if env.Node.Error == "" {
			s.pools.native["javascript"] = stream.NewPool(stream.PoolConfig{
				Name: "javascript", Size: n, Start: s.coldNativeBackend("javascript", env.Node.Path).Start, Logger: s.log,
			})
		}
		if env.PythonBackend == "native" && env.Python.Error == "" {
			s.pools.native["python"] = stream.NewPool(stream.PoolConfig{
				Name: "python", Size: n, Start: s.coldNativeBackend("python", env.Python.Path).Start, Logger: s.log,
			})
		}
	}
}

// stats reports every pool, including those that are off (size 0).
func (p *pools) stats(cfg Config) map[string]stream.PoolStats {
	out := map[string]stream.PoolStats{
		"kernel":     {Name: "kernel", Warmup: !cfg.NoKernelWarmup},
		"javascript": {Name: "javascript"},
		"python":     {Name: "python"},
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
