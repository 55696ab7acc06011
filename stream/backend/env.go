package backend

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel"
	"github.com/aiod/aiod/replbridge"
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
	// Spec is the kernel.json as found (or rebuilt from what was read), for
	// the Jupyter kernelspecs API.
	Spec json.RawMessage `json:"-"`
	spec *kernel.Spec
}

// Environment is what discovery found at start: kernelspecs, native
// interpreters, and the backend Python uses on the code routes.
type Environment struct {
	Kernels       []KernelInfo
	PythonKernel  *KernelInfo // the kernelspec Python runs in; nil when none has ipykernel
	Python        Interpreter // native Python
	Node          Interpreter // Node.js
	Bash          Interpreter // bash
	KernelName    string      // the kernelspec asked for (--kernel-name), "" for the default
	PythonBackend string      // "kernel" or "native" on the code routes
	BackendError  string      // why the pinned backend cannot run, when it cannot
	Warnings      []string
}

// Kernel returns the kernelspec named name, or nil.
func (e *Environment) Kernel(name string) *KernelInfo {
	for i := range e.Kernels {
		if e.Kernels[i].Name == name {
			return &e.Kernels[i]
		}
	}
	return nil
}

// Discover looks for kernelspecs and interpreters, each probe bounded.
// codeBackend is --code-backend (auto, native or kernel) and kernelName
// --kernel-name.
func Discover(ctx context.Context, codeBackend, kernelName string) *Environment {
	env := &Environment{}
	specs, warns := kernel.LoadSpecs(kernel.SpecDirs())
	for _, w := range warns {
		env.Warnings = append(env.Warnings, w.Error())
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sp := range specs {
		ki := KernelInfo{Name: sp.Name, DisplayName: sp.DisplayName, Language: sp.Language, Dir: sp.Dir, Spec: sp.Raw, spec: sp}
		if len(sp.Argv) > 0 {
			ki.Interpreter = sp.Argv[0]
		}
		if len(ki.Spec) == 0 {
			ki.Spec, _ = json.Marshal(map[string]any{"argv": sp.Argv, "display_name": sp.DisplayName, "language": sp.Language})
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
			v, err := probeSpec(pctx, ki.spec)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				env.Warnings = append(env.Warnings, fmt.Sprintf("kernelspec %s: %v", ki.Name, err))
				return
			}
			ki.Python, ki.IPyKernel = v.Python, v.IPyKernel
		}()
	}
	wg.Add(3)
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
	go func() {
		defer wg.Done()
		p, v, err := replbridge.FindBash()
		env.Bash = interp("bash", p, v, err)
	}()
	wg.Wait()
	env.KernelName = kernelName
	env.PythonKernel = pickKernel(env.Kernels, kernelName)
	env.PythonBackend, env.BackendError = chooseBackend(codeBackend, env)
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

// IPyKernelHint says how to get a Python kernel.
const IPyKernelHint = "install it with: apt-get install python3-ipykernel python3-pandas python3-matplotlib (or pip install ipykernel pandas matplotlib), or set AIO_CODE_BACKEND=native"

func chooseBackend(pin string, env *Environment) (backend, problem string) {
	switch pin {
	case "kernel":
		if env.PythonKernel == nil {
			what := "no Jupyter kernelspec with ipykernel was found"
			if env.KernelName != "" {
				what = fmt.Sprintf("kernelspec %q was not found or has no working ipykernel", env.KernelName)
			}
			return "kernel", "AIO_CODE_BACKEND=kernel but " + what + "; " + IPyKernelHint
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
