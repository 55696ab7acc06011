package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aiod/aiod/kernel"
	"github.com/aiod/aiod/replbridge"
	"github.com/aiod/aiod/stream"
)

// Interpreter is one interpreter found on the host.
type Interpreter struct {
	Language string `json:"language"`
	Path     string `json:"path"`
	Version  string `json:"version"`
	Error    string `json:"error,omitempty"` // why it is unusable, when it is
}

// KernelInfo is one Jupyter kernelspec found on the host.
type KernelInfo struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name"`
	Language    string `json:"language"`
	Interpreter string `json:"interpreter"`
	Python      string `json:"python_version,omitempty"`
	IPyKernel   string `json:"ipykernel_version,omitempty"`
	Dir         string `json:"dir"`
	spec        *kernel.Spec
}

// Environment is what discovery found at start: kernelspecs, native
// interpreters, and the backend Python uses on the code routes.
type Environment struct {
	Kernels       []KernelInfo
	PythonKernel  *KernelInfo // the kernelspec Python runs in; nil when none has ipykernel
	Python        Interpreter // native Python
	Node          Interpreter // Node.js
	KernelName    string      // the kernelspec asked for (--kernel-name), "" for the default
	PythonBackend string      // "kernel" or "native" on the code routes
	BackendError  string      // why the pinned backend cannot run, when it cannot
	Warnings      []string
}

// Discover looks for kernelspecs and interpreters, each probe bounded.
func Discover(ctx context.Context, cfg Config) *Environment {
	env := &Environment{}
	specs, warns := kernel.LoadSpecs(kernel.SpecDirs())
	for _, w := range warns {
		env.Warnings = append(env.Warnings, w.Error())
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sp := range specs {
		ki := KernelInfo{Name: sp.Name, DisplayName: sp.DisplayName, Language: sp.Language, Dir: sp.Dir, spec: sp}
		if len(sp.Argv) > 0 {
			ki.Interpreter = sp.Argv[0]
		}
		env.Kernels = append(env.Kernels, ki)
	}
	for i := range env.Kernels {
		ki := &env.Kernels[i]
		if !ki.spec.IsIPyKernel() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			v, err := ki.spec.Probe(pctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				env.Warnings = append(env.Warnings, fmt.Sprintf("kernelspec %s: %v", ki.Name, err))
				return
			}
			ki.Python, ki.IPyKernel = v.Python, v.IPyKernel
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		p, v, err := replbridge.FindPython()
		env.Python = interp("python", p, v, err)
	}()
	go func() {
		defer wg.Done()
		p, v, err := replbridge.FindNode()
		env.Node = interp("javascript", p, v, err)
	}()
	wg.Wait()
	env.KernelName = cfg.KernelName
	env.PythonKernel = pickKernel(env.Kernels, cfg.KernelName)
	env.PythonBackend, env.BackendError = chooseBackend(cfg.CodeBackend, env)
	return env
}

func interp(lang, path, version string, err error) Interpreter {
	it := Interpreter{Language: lang, Path: path, Version: version}
	if err != nil {
		it.Error = err.Error()
	}
	return it
}

// pickKernel chooses the Python kernelspec: the named one when a name is
// given (nil when it is missing or has no working ipykernel), else python3,
// else the first Python spec running ipykernel that answered its probe.
func pickKernel(ks []KernelInfo, name string) *KernelInfo {
	usable := func(k *KernelInfo) bool {
		return k.spec.IsIPyKernel() && k.IPyKernel != "" && strings.EqualFold(k.Language, "python")
	}
	if name != "" {
		for i := range ks {
			if ks[i].Name == name && usable(&ks[i]) {
				return &ks[i]
			}
		}
		return nil
	}
	for i := range ks {
		if ks[i].Name == "python3" && usable(&ks[i]) {
			return &ks[i]
		}
	}
	for i := range ks {
		if usable(&ks[i]) {
			return &ks[i]
		}
	}
	return nil
}

const ipykernelHint = "install it with: apt-get install python3-ipykernel python3-pandas python3-matplotlib (or pip install ipykernel pandas matplotlib), or set AIO_CODE_BACKEND=native"

func chooseBackend(pin string, env *Environment) (backend, problem string) {
	switch pin {
	case "kernel":
		if env.PythonKernel == nil {
			what := "no Jupyter kernelspec with ipykernel was found"
			if env.KernelName != "" {
				what = fmt.Sprintf("kernelspec %q was not found or has no working ipykernel", env.KernelName)
			}
			return "kernel", "AIO_CODE_BACKEND=kernel but " + what + "; " + ipykernelHint
		}
		return "kernel", ""
	case "native":
		if env.Python.Error != "" {
			return "native", env.Python.Error
		}
		return "native", ""
	}
	if env.PythonKernel != nil {
		return "kernel", ""
	}
	if env.Python.Error != "" {
		return "native", "no Python found: no kernelspec with ipykernel and " + env.Python.Error
	}
	return "native", ""
}

// ErrNoInterpreter is answered with 503.
type ErrNoInterpreter struct{ Msg string }

func (e *ErrNoInterpreter) Error() string { return e.Msg }

// backendFor returns how code of lang runs on the code routes. forceKernel
// is for /v1/jupyter/*, which always use a kernel.
func (s *Server) backendFor(lang string, forceKernel bool) (stream.Backend, error) {
	env := s.env
	switch {
	case lang == "javascript":
		if env.Node.Error != "" {
			return stream.Backend{}, &ErrNoInterpreter{env.Node.Error}
		}
		return s.nativeBackend("javascript", env.Node.Path), nil
	case s.remote != nil && s.cfg.CodeBackend == "auto" && s.remote.reachable():
		// The page's first choice. A session made now falls back to the
		// local backend for later runtimes if the server goes away.
		var fallback stream.Backend
		if fb, err := s.localPythonBackend(forceKernel); err == nil {
			fallback = fb
		}
		return s.remotePythonBackend(fallback), nil
	default:
		return s.localPythonBackend(forceKernel)
	}
}

// localPythonBackend is the embedded kernel, or the native REPL.
func (s *Server) localPythonBackend(forceKernel bool) (stream.Backend, error) {
	env := s.env
	switch {
	case forceKernel || env.PythonBackend == "kernel":
		if env.PythonKernel == nil {
			msg := env.BackendError
			if msg == "" {
				msg = "python kernels need a Jupyter kernelspec with ipykernel; none was found; " + ipykernelHint
			}
			return stream.Backend{}, &ErrNoInterpreter{msg}
		}
		return s.kernelBackend(env.PythonKernel.spec), nil
	default:
		if env.BackendError != "" {
			return stream.Backend{}, &ErrNoInterpreter{env.BackendError}
		}
		return s.nativeBackend("python", env.Python.Path), nil
	}
}

func (s *Server) kernelBackend(spec *kernel.Spec) stream.Backend {
	b := s.coldKernelBackend(spec)
	if p := s.pools.kernel; p != nil && s.env.PythonKernel != nil && spec == s.env.PythonKernel.spec {
		b.Start = p.Start
	}
	return b
}

func (s *Server) coldKernelBackend(spec *kernel.Spec) stream.Backend {
	return stream.Backend{
		Name: "kernel", Language: "python", Idle: s.cfg.KernelIdle,
		Start: func(ctx context.Context, h kernel.Handler) (stream.Runtime, error) {
			k, err := kernel.Start(ctx, kernel.Options{
				Spec: spec, Handler: h, Cwd: s.cfg.Workdir,
				StartTimeout: s.cfg.KernelStartTimeout, Logger: s.log,
				Templates: s.pools.templates, Transport: s.cfg.KernelTransport,
			})
			if err != nil {
				return nil, fmt.Errorf("start python kernel %s: %w", spec.Name, err)
			}
			return k, nil
		},
	}
}

func (s *Server) nativeBackend(lang, path string) stream.Backend {
	b := s.coldNativeBackend(lang, path)
	if p := s.pools.native[lang]; p != nil {
		b.Start = p.Start
	}
	return b
}

func (s *Server) coldNativeBackend(lang, path string) stream.Backend {
	return stream.Backend{
		Name: "native", Language: lang, Idle: s.cfg.NativeIdle,
		Start: func(ctx context.Context, h kernel.Handler) (stream.Runtime, error) {
			r, err := replbridge.Start(ctx, replbridge.Options{
				Language: lang, Interpreter: path, Handler: h, Cwd: s.cfg.Workdir, Logger: s.log,
			})
			if err != nil {
				return nil, fmt.Errorf("start %s REPL: %w", lang, err)
			}
			return r, nil
		},
	}
}
