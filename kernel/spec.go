package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/goccy/go-json"
)

// Interrupt modes of a kernelspec.
const (
	InterruptSignal  = "signal"  // SIGINT to the kernel's process group
	InterruptMessage = "message" // interrupt_request on the control channel
)

// Spec is one kernelspec: a folder holding a kernel.json.
type Spec struct {
	Name          string            // folder name, e.g. "python3"
	Dir           string            // absolute folder path
	Argv          []string          // command line; "{connection_file}" is substituted at start
	DisplayName   string            // display_name
	Language      string            // language, e.g. "python"
	InterruptMode string            // InterruptSignal (the default) or InterruptMessage
	Env           map[string]string // extra environment for the kernel process
	Metadata      json.RawMessage   // metadata, nil when absent
	Raw           json.RawMessage   // the whole kernel.json as read
}

// specFile is the on-disk shape of kernel.json.
type specFile struct {
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode"`
	Env           map[string]string `json:"env"`
	Metadata      json.RawMessage   `json:"metadata"`
}

// IsIPyKernel reports whether the spec launches ipykernel (its argv names
// the ipykernel module or launcher).
func (s *Spec) IsIPyKernel() bool {
	return slices.ContainsFunc(s.Argv, func(a string) bool {
		return strings.Contains(a, "ipykernel")
	})
}

// SpecDirs returns the folders searched for kernelspecs, highest priority
// first: each entry of JUPYTER_PATH with "kernels" appended, the user data
// folder (JUPYTER_DATA_DIR, else ~/.local/share/jupyter) with "kernels",
// /usr/local/share/jupyter/kernels and /usr/share/jupyter/kernels.
func SpecDirs() []string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("JUPYTER_PATH")) {
		if d != "" {
			dirs = append(dirs, filepath.Join(d, "kernels"))
		}
	}
	if d := os.Getenv("JUPYTER_DATA_DIR"); d != "" {
		dirs = append(dirs, filepath.Join(d, "kernels"))
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".local", "share", "jupyter", "kernels"))
	}
	return append(dirs, "/usr/local/share/jupyter/kernels", "/usr/share/jupyter/kernels")
}

// LoadSpecs reads the kernelspecs in dirs, sorted by name. When two folders
// hold a spec of the same name, the one in the earlier folder wins. Missing
// folders are ignored; each unreadable or invalid kernel.json is skipped and
// reported in warnings.
func LoadSpecs(dirs []string) (specs []*Spec, warnings []error) {
	seen := make(map[string]bool)
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				warnings = append(warnings, fmt.Errorf("read kernelspec folder: %w", err))
			}
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if seen[name] {
				continue
			}
			s, err := ReadSpec(filepath.Join(dir, name))
			if errors.Is(err, os.ErrNotExist) {
				continue // a folder without kernel.json is not a kernelspec
			}
			if err != nil {
				warnings = append(warnings, err)
				continue
			}
			seen[name] = true
			specs = append(specs, s)
		}
	}
	slices.SortFunc(specs, func(a, b *Spec) int { return strings.Compare(a.Name, b.Name) })
	return specs, warnings
}

// FindSpecs returns the kernelspecs found in SpecDirs. The specs returned
// are usable even when err is non-nil: err then joins the warnings about
// kernel.json files that were skipped.
func FindSpecs() ([]*Spec, error) {
	specs, warnings := LoadSpecs(SpecDirs())
	return specs, errors.Join(warnings...)
}

// FindSpec returns the kernelspec called name from SpecDirs, or an error
// wrapping ErrNoSpec.
func FindSpec(name string) (*Spec, error) {
	specs, warnings := LoadSpecs(SpecDirs())
	for _, s := range specs {
		if s.Name == name {
			return s, nil
		}
	}
	return nil, notFound(fmt.Sprintf("find kernelspec %q", name), warnings)
}

// DefaultPythonSpec picks the Python kernel to use when none is named:
// "python3" when it exists, else the first ipykernel spec whose language is
// Python, else the first spec whose language is Python.
func DefaultPythonSpec() (*Spec, error) {
	specs, warnings := LoadSpecs(SpecDirs())
	if s := pickPython(specs); s != nil {
		return s, nil
	}
	return nil, notFound("find a python kernelspec", warnings)
}

func pickPython(specs []*Spec) *Spec {
	var ipy, py *Spec
	for _, s := range specs {
		if s.Name == "python3" {
			return s
		}
		if !strings.EqualFold(s.Language, "python") {
			continue
		}
		if ipy == nil && s.IsIPyKernel() {
			ipy = s
		}
		if py == nil {
			py = s
		}
	}
	if ipy != nil {
		return ipy
	}
	return py
}

func notFound(what string, warnings []error) error {
	err := fmt.Errorf("%s in %s: %w", what, strings.Join(SpecDirs(), ", "), ErrNoSpec)
	if len(warnings) > 0 {
		return errors.Join(append([]error{err}, warnings...)...)
	}
	return err
}

// ReadSpec reads the kernelspec in folder dir (its kernel.json). The error
// wraps os.ErrNotExist when dir holds no kernel.json.
func ReadSpec(dir string) (*Spec, error) {
	path := filepath.Join(dir, "kernel.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kernelspec: %w", err)
	}
	var f specFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("read kernelspec %s: decode: %w", path, err)
	}
	if len(f.Argv) == 0 || f.Argv[0] == "" {
		return nil, fmt.Errorf("read kernelspec %s: argv is empty", path)
	}
	switch f.InterruptMode {
	case "":
		f.InterruptMode = InterruptSignal
	case InterruptSignal, InterruptMessage:
	default:
		return nil, fmt.Errorf("read kernelspec %s: unknown interrupt_mode %q", path, f.InterruptMode)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("read kernelspec %s: %w", path, err)
	}
	return &Spec{
		Name:          filepath.Base(abs),
		Dir:           abs,
		Argv:          f.Argv,
		DisplayName:   f.DisplayName,
		Language:      f.Language,
		InterruptMode: f.InterruptMode,
		Env:           f.Env,
		Metadata:      f.Metadata,
		Raw:           raw,
	}, nil
}

// spawnBoot runs aiod's patches (AIOD_KERNEL_PATCHES, dropped from the
// environment first), then the launcher module named in sys.argv[1] as -m
// would (sys.path[0] the working folder).
const spawnBoot = "import os, runpy, sys\nexec(os.environ.pop('AIOD_KERNEL_PATCHES'))\n" +
	"sys.path[0] = os.getcwd()\nrunpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"

// spawned is command's argv as a spawn runs it, and the environment entry
// it adds: INTERPRETER -m ipykernel_launcher (or ipykernel) runs aiod's
// patches first, as a forked kernel has them from its template.
func (s *Spec) spawned(argv []string) ([]string, string) {
	a := s.Argv
	if len(a) < 3 || a[1] != "-m" || (a[2] != "ipykernel_launcher" && a[2] != "ipykernel") {
		return argv, ""
	}
	// The module name is sys.argv[1].
	return slices.Concat(argv[:1], []string{"-c", spawnBoot}, argv[2:]), "AIOD_KERNEL_PATCHES=" + kernelPatches + "\napply({})\n"
}

// command returns the spec's argv with {connection_file} and
// {resource_dir} substituted. An ipykernel gets an in-memory history (else
// every kernel commits each cell to one history.sqlite, and dozens of them
// print "database is locked" into users' output).
func (s *Spec) command(connFile string) []string {
	r := strings.NewReplacer("{connection_file}", connFile, "{resource_dir}", s.Dir)
	argv := make([]string, len(s.Argv), len(s.Argv)+1)
	for i, a := range s.Argv {
		argv[i] = r.Replace(a)
	}
	if s.IsIPyKernel() {
		argv = append(argv, "--HistoryManager.hist_file=:memory:")
	}
	return argv
}

// environ returns the spec's env as KEY=VALUE entries, with ${VAR}
// references expanded from base (entries of the form KEY=VALUE); unknown
// references are kept as written, as Jupyter does.
func (s *Spec) environ(base []string) []string {
	lookup := make(map[string]string, len(base))
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok {
			lookup[k] = v
		}
	}
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		v := os.Expand(s.Env[k], func(name string) string {
			if val, ok := lookup[name]; ok {
				return val
			}
			return "${" + name + "}"
		})
		out = append(out, k+"="+v)
	}
	return out
}
