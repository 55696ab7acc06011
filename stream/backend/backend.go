package backend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/aiod/aiod/kernel"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/replbridge"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend/isolate"
	"github.com/aiod/aiod/stream/backend/sandbox"
)

// Backend names, as stream.Backend.Name and jupyter.RuntimeInfo.Backend
// carry them.
const (
	Kernel = "kernel"  // a local Jupyter kernel
	Remote = "jupyter" // a kernel on AIO_JUPYTER_ENDPOINT
	Native = "native"  // a native REPL process
	Python = "python"
	JS     = "javascript"
	Bash   = "bash"
)

// Config is what New needs; zero values take the defaults named.
type Config struct {
	CodeBackend          string            // auto, native or kernel; "auto"
	KernelName           string            // --kernel-name; "" picks python3 or the first ipykernel
	KernelIdle           time.Duration     // idle limit of kernel sessions
	NativeIdle           time.Duration     // idle limit of native REPL sessions
	KernelStartTimeout   time.Duration     // bound on a kernel start; 60 s
	NativeStartTimeout   time.Duration     // bound on a native REPL's start; 0: replbridge's 10 s
	Workdir              string            // working directory of runtimes; "" is the daemon's
	JupyterEndpoint      string            // a Jupyter server to run Python kernels on
	JupyterToken         string            // its token
	JupyterKernel        string            // kernelspec on that server; "" is its default
	JupyterStartTimeout  time.Duration     // bound on a remote kernel start; 120 s
	JupyterProbeInterval time.Duration     // how often the server is probed; 30 s
	KernelPrewarm        int               // Python kernels kept started and ready
	CodePrewarm          int               // native REPL processes kept ready per language
	NoKernelWarmup       bool              // do not import pandas and matplotlib in pooled kernels (nor in templates)
	KernelStart          string            // fork (from a warm template per kernelspec) or spawn; "" is fork
	KernelTransport      string            // ipc or tcp for local kernels; "" is ipc for ipykernel specs, tcp for others
	Counter              jupyter.Counter   // where runtimes count what they drop; nil counts nothing
	StartGate            *stream.StartGate // the registry's start gate, which pool refills wait for; nil: none
	TenantIdle           time.Duration     // --tenant-idle: a tenant unused and running nothing this long is let go; 0 never
	// Isolation is the limits, user and environment of local runtimes; the
	// zero value limits nothing but still scrubs the environment.
	Isolation Isolation
	Logger    *slog.Logger
}

// Runtimes builds the runtimes of every language. Create it with New and
// release it with Close, after the sessions using its backends are closed.
type Runtimes struct {
	cfg    Config
	log    *slog.Logger
	env    *Environment
	remote *remoteBackend // nil without a Jupyter endpoint
	pools  pools
	iso    *isolate.Isolator
	base   []string // the base environment of local runtimes

	userFiles userFiles    // the file helper of --runtime-user
	scratch   scratch      // the scratch folder of runtimes outside tenants' sandboxes (scratch.go)
	tpools    *tenantPools // each tenant's prewarm pools, under tenant isolation; nil without pools
	kernels   string       // STATE/kernels under tenant isolation: the kernels' private folders; "" for the system's temporary folder
}

// New discovers the interpreters, starts probing the remote server when
// one is configured, and starts filling the prewarm pools.
func New(ctx context.Context, cfg Config) (*Runtimes, error) {
	if cfg.CodeBackend == "" {
		cfg.CodeBackend = "auto"
	}
	switch cfg.CodeBackend {
	case "auto", Native, Kernel:
	default:
		return nil, fmt.Errorf("code backend %q: want auto, native or kernel", cfg.CodeBackend)
	}
	if cfg.KernelStartTimeout <= 0 {
		cfg.KernelStartTimeout = kernel.DefaultStartTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := validKernelStart(cfg); err != nil {
		return nil, err
	}
	if cfg.Isolation.Logger == nil {
		cfg.Isolation.Logger = cfg.Logger
	}
	if cfg.Isolation.Workdir == "" {
		// A tenant works in --workdir (its own folder shown there), or
		// in its HOME when none is given.
		cfg.Isolation.Workdir = sandbox.HomePath
		if cfg.Workdir != "" {
			if abs, err := filepath.Abs(cfg.Workdir); err == nil {
				cfg.Isolation.Workdir = abs
			}
		}
	}
	iso, err := isolate.New(cfg.Isolation)
	if err != nil {
		return nil, err
	}
	if iso.Mode() == isolate.ModeTenant {
		cfg.Workdir = cfg.Isolation.Workdir // as runtimes see it
	}
	r := &Runtimes{cfg: cfg, log: cfg.Logger, iso: iso, base: iso.Environ(os.Environ()),
		env: Discover(ctx, cfg.CodeBackend, cfg.KernelName)}
	if w := hiddenWorkdir(iso.Mode(), cfg.Workdir); w != "" {
		r.env.Warnings = append(r.env.Warnings, w)
	}
	if ts := iso.Tenants(); ts != nil {
		r.kernels = kernelsDir(ts.StateDir(), r.log)
	}
	if cfg.JupyterEndpoint != "" {
		rb, err := newRemoteBackend(cfg)
		if err != nil {
			_ = iso.Close()
			return nil, err
		}
		r.remote = rb
	}
	if err := r.startPools(); err != nil {
		if r.remote != nil {
			r.remote.close()
		}
		return nil, errors.Join(err, iso.Close())
	}
	r.releaseIdleTenants()
	return r, nil
}

// kernelsDir makes STATE/kernels, the folder of the kernels' private
// folders (connection files, ipc sockets), emptied first: what is there is
// a stopped daemon's (the state directory is one daemon's at a time), one
// killed without a stop. When that path is too long for a socket's
// address under it (kernel.MaxConnDir), the folder is a stand-in in the
// temporary folder named after the state directory, so that the next
// daemon of that state directory empties it too. "" (each kernel's folder
// in the temporary folder) when it cannot be made.
func kernelsDir(state string, log *slog.Logger) string {
	dir := filepath.Join(state, "kernels")
	standIn := len(dir) > kernel.MaxConnDir
	if standIn {
		sweepKernelsDirs()
		dir = shortKernelsDir(state)
	}
	err := os.RemoveAll(dir)
	if err == nil {
		err = os.Mkdir(dir, 0o700)
	}
	if err == nil && standIn {
		err = os.WriteFile(filepath.Join(dir, standInOf), []byte(absPath(state)), 0o600)
	}
	if err != nil {
		log.Warn("kernels' folders go to the temporary folder", "err", err)
		return ""
	}
	return dir
}

// shortKernelsDir is the stand-in for STATE/kernels in the temporary
// folder: the same for one state directory, another for each other. Made
// with Mkdir, never reused as found: a folder someone else put there
// first makes kernelsDir fail (and each kernel get a random folder).
func shortKernelsDir(state string) string {
	sum := sha256.Sum256([]byte(absPath(state)))
	return filepath.Join(os.TempDir(), "aiod-kernels-"+hex.EncodeToString(sum[:6]))
}

// standInOf is the file of a stand-in that names its state directory.
const standInOf = "state-dir"

// sweepKernelsDirs removes the stand-ins (ours: this user's, naming their
// state directory) whose state directory is gone: a daemon killed without
// a stop, and never started again there, left them.
func sweepKernelsDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "aiod-kernels-*"))
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || !ownedByUs(fi) {
			continue
		}
		state, err := os.ReadFile(filepath.Join(d, standInOf))
		if err != nil || len(state) == 0 {
			continue
		}
		if _, err := os.Stat(string(state)); errors.Is(err, fs.ErrNotExist) {
			_ = os.RemoveAll(d)
		}
	}
}

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// hiddenWorkdir warns when, under tenant isolation, the host's folder at
// the working folder holds files: each tenant sees a folder of its own
// there, empty at first, not the host's (a new user's data in
// --workdir /data looked lost). "" when there is nothing to say.
func hiddenWorkdir(mode, workdir string) string {
	if mode != isolate.ModeTenant || workdir == "" || workdir == sandbox.HomePath {
		return ""
	}
	f, err := os.Open(workdir)
	if err != nil {
		return ""
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("--workdir %s holds files on the host that runtimes do not see: under tenant isolation each tenant's working folder is a folder of its own at that path, empty at first (its files are kept in the state directory); upload data through the file plane, or run with --isolation none", workdir)
}

// NetworkNote is what a call that failed on a network error is told: the
// setting that keeps tenants' runtimes off the network and the one that
// opens it. Without tenant isolation or with the host's network, "".
func (r *Runtimes) NetworkNote() string {
	ts := r.iso.Tenants()
	if ts == nil {
		return ""
	}
	switch ts.Network() {
	case sandbox.NetworkNone:
		return "the runtime has no network (--runtime-network none), so a name lookup or connection fails; --runtime-network allow with --egress-allow HOST:PORT lets chosen hosts through, --runtime-network host gives the host's network (docs/isolation.md)"
	case sandbox.NetworkAllow:
		return "the runtime reaches only the hosts of --egress-allow, through its proxy (--runtime-network allow); add the host to --egress-allow (docs/isolation.md)"
	}
	return ""
}

// Env is what discovery found.
func (r *Runtimes) Env() *Environment { return r.env }

// Workdir is the working folder of runtimes as they see it: --workdir,
// aiod's own folder when none is given, or under tenant isolation the
// tenant's (at --workdir, else its HOME).
func (r *Runtimes) Workdir() string {
	if r.cfg.Workdir == "" {
		wd, _ := os.Getwd()
		return wd
	}
	return r.cfg.Workdir
}

// Close stops the pools (closing their runtimes) and the remote probe.
func (r *Runtimes) Close(ctx context.Context) error {
	err := errors.Join(r.tpools.close(ctx), r.pools.close(ctx))
	if r.remote != nil {
		r.remote.close()
	}
	r.userFiles.once.Do(func() {}) // a helper made from now on would leak: none is
	if f := r.userFiles.f; f != nil {
		f.Close()
	}
	r.scratch.once.Do(func() {})
	if r.scratch.dir != "" {
		err = errors.Join(err, os.RemoveAll(r.scratch.dir))
	}
	if r.kernels != "" {
		// Kernels still ending past the shutdown's bound leave nothing.
		err = errors.Join(err, os.RemoveAll(r.kernels))
	}
	return errors.Join(err, r.iso.Close())
}

// ErrNoInterpreter is returned when no interpreter can run the code;
// routes answer it with 503.
type ErrNoInterpreter struct{ Msg string }

func (e *ErrNoInterpreter) Error() string { return e.Msg }

// Want says what runtime a call needs.
type Want struct {
	Language string // python, javascript or bash
	// Kernel makes Python run in a kernel whatever the code backend (the
	// /v1/jupyter routes and the Jupyter kernels API).
	Kernel bool
	// KernelSpec names a local kernelspec; "" is the default one.
	KernelSpec string
	// Cwd is where new runtimes start; "" is the configured workdir.
	Cwd string
	// Env is extra environment for new runtimes (KEY=VALUE); kernels
	// started with it do not come from the prewarm pool.
	Env []string
	// Idle replaces the backend's idle limit for sessions made with it.
	Idle time.Duration
	// Tenant is the tenant the runtime is started for; its sandbox under
	// --isolation tenant.
	Tenant string
}

// For returns how a call that wants w runs. The error is an
// *ErrNoInterpreter when nothing can run it.
func (r *Runtimes) For(w Want) (stream.Backend, error) {
	t, err := r.iso.Tenant(w.Tenant)
	if err != nil {
		return stream.Backend{}, &ErrNoInterpreter{err.Error()}
	}
	b, err := r.choose(w, t)
	if err != nil {
		return b, err
	}
	if w.Cwd != "" {
		b = startIn(b, w.Cwd)
		b.Cwd = w.Cwd
	}
	if w.Idle > 0 {
		b.Idle = w.Idle
	}
	return b, nil
}

// choose picks the backend of w, for tenant t (nil without tenant
// isolation).
func (r *Runtimes) choose(w Want, t *sandbox.Tenant) (stream.Backend, error) {
	env := r.env
	switch {
	case w.KernelSpec != "":
		ki := env.Kernel(w.KernelSpec)
		if ki == nil {
			return stream.Backend{}, &ErrNoInterpreter{fmt.Sprintf("no kernelspec %q: see GET /api/kernelspecs", w.KernelSpec)}
		}
		b := r.kernelBackend(ki, w.Env, t)
		if w.Language != "" {
			b.Language = w.Language
		}
		return b, nil
	case w.Language == JS:
		if env.Node.Error != "" {
			return stream.Backend{}, &ErrNoInterpreter{env.Node.Error}
		}
		return r.nativeBackend(JS, env.Node.Path, w.Env, t), nil
	case w.Language == Bash:
		if env.Bash.Error != "" {
			return stream.Backend{}, &ErrNoInterpreter{env.Bash.Error}
		}
		return r.nativeBackend(Bash, env.Bash.Path, w.Env, t), nil
	case r.remote != nil && r.cfg.CodeBackend == "auto" && !w.Kernel && r.remote.reachable():
		// The first choice. A session made now falls back to the local
		// backend for later runtimes if the server goes away.
		var fallback stream.Backend
		if fb, err := r.localPython(w, t); err == nil {
			fallback = fb
		}
		return r.remoteBackend(fallback), nil
	default:
		return r.localPython(w, t)
	}
}

// localPython is the embedded kernel, or the native REPL.
func (r *Runtimes) localPython(w Want, t *sandbox.Tenant) (stream.Backend, error) {
	env := r.env
	if w.Kernel || env.PythonBackend == Kernel {
		if env.PythonKernel == nil {
			msg := env.BackendError
			if msg == "" {
				msg = "python kernels need a Jupyter kernelspec with ipykernel; none was found; " + IPyKernelHint
			}
			return stream.Backend{}, &ErrNoInterpreter{msg}
		}
		return r.kernelBackend(env.PythonKernel, w.Env, t), nil
	}
	if env.BackendError != "" {
		return stream.Backend{}, &ErrNoInterpreter{env.BackendError}
	}
	return r.nativeBackend(Python, env.Python.Path, w.Env, t), nil
}

// PythonBackend is the backend new Python sessions get on the code routes
// right now: "jupyter" while the remote server answers.
func (r *Runtimes) PythonBackend() string {
	if r.remote != nil && r.cfg.CodeBackend == "auto" && r.remote.reachable() {
		return Remote
	}
	return r.env.PythonBackend
}

// Remote is the latest probe's view of the remote server; nil when none is
// configured.
func (r *Runtimes) Remote() *RemoteInfo {
	if r.remote == nil {
		return nil
	}
	ri := r.remote.Info()
	return &ri
}

func (r *Runtimes) kernelBackend(ki *KernelInfo, env []string, t *sandbox.Tenant) stream.Backend {
	b := r.coldKernelBackend(ki.spec, env, t)
	if len(env) > 0 || r.env.PythonKernel == nil || ki.spec != r.env.PythonKernel.spec {
		return b
	}
	if p := r.pools.kernel; p != nil && t == nil {
		b.Start = p.Start
	}
	if t != nil {
		if tp := r.tenantPool(t); tp != nil && tp.kernel != nil {
			b.Start = tp.kernel.Start
		}
	}
	return b
}

// coldKernelBackend starts kernels of spec, with extra environment env, in
// tenant t's sandbox (nil: none). kernel.Start's errors already say "start
// kernel NAME: ...".
func (r *Runtimes) coldKernelBackend(spec *kernel.Spec, env []string, t *sandbox.Tenant) stream.Backend {
	return stream.Backend{
		Name: Kernel, Language: Python, Spec: spec.Name, Idle: r.cfg.KernelIdle,
		Start: func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
			t, held, err := r.current(t)
			if err != nil {
				return nil, err
			}
			defer held()
			p := &placement{r: r, t: t}
			k, err := kernel.Start(ctx, kernel.Options{
				Spec: spec, Handler: h, Cwd: r.cfg.Workdir, ConnDir: r.kernels, Env: env,
				StartTimeout: r.cfg.KernelStartTimeout, Logger: r.log, Counter: r.cfg.Counter,
				Templates: r.pools.templates, Transport: r.cfg.KernelTransport,
				Environ: r.base, Credential: r.iso.Credential(), Confine: confineKernel(t), Admit: p.admit(), Charge: p.charge(),
			})
			if err != nil {
				p.failed()
				return nil, workdirProblem(r.cfg.Workdir, t, err)
			}
			return p.limit(k), nil
		},
	}
}

func (r *Runtimes) nativeBackend(lang, path string, env []string, t *sandbox.Tenant) stream.Backend {
	b := r.coldNativeBackend(lang, path, env, t)
	if len(env) > 0 { // a pooled process has the base environment only
		return b
	}
	if p := r.pools.native[lang]; p != nil && t == nil {
		b.Start = p.Start
	}
	if t != nil {
		if tp := r.tenantPool(t); tp != nil && tp.native[lang] != nil {
			b.Start = tp.native[lang].Start
		}
	}
	return b
}

// coldNativeBackend starts native REPLs with extra environment env, in
// tenant t's sandbox (nil: none); replbridge.Start's errors already say
// "start LANG REPL: ...".
func (r *Runtimes) coldNativeBackend(lang, path string, env []string, t *sandbox.Tenant) stream.Backend {
	return stream.Backend{
		Name: Native, Language: lang, Idle: r.cfg.NativeIdle,
		Start: func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
			t, held, err := r.current(t)
			if err != nil {
				return nil, err
			}
			defer held()
			p := &placement{r: r, t: t}
			rp, err := replbridge.Start(ctx, replbridge.Options{
				Language: lang, Interpreter: path, Handler: h, Cwd: r.cfg.Workdir, Env: env, Logger: r.log,
				Environ: r.base, Credential: r.iso.Credential(), Wrap: wrapIn(t), Admit: p.admit(),
				StartTimeout: r.cfg.NativeStartTimeout,
			})
			if err != nil {
				p.failed()
				if errors.Is(err, replbridge.ErrNotReady) {
					err = fmt.Errorf("%w (the bound is --native-start-timeout, %s, stretched while it waited for a CPU)", err, r.nativeStart())
				}
				return nil, workdirProblem(r.cfg.Workdir, t, err)
			}
			return p.limit(rp), nil
		},
	}
}

// nativeStart is the bound on a native REPL's start.
func (r *Runtimes) nativeStart() time.Duration {
	if r.cfg.NativeStartTimeout > 0 {
		return r.cfg.NativeStartTimeout
	}
	return replbridge.DefaultStartTimeout
}

// KernelStart is how local kernels start: the mode, the transport, and the
// templates forked from (one per kernelspec used so far).
type KernelStart struct {
	Mode      string          `json:"mode"`
	Transport string          `json:"transport"`
	Templates []TemplateStats `json:"templates"`
}

// TemplateStats describes one kernel template.
type TemplateStats = kernel.TemplateStats

// KernelStart reports how local kernels start.
func (r *Runtimes) KernelStart() KernelStart {
	tr := r.cfg.KernelTransport
	if tr == "" {
		tr = "auto" // ipc for ipykernel kernelspecs, tcp for others
	}
	return KernelStart{Mode: r.pools.templates.Mode(), Transport: tr,
		Templates: append([]TemplateStats{}, r.pools.templates.Stats()...)}
}

// PoolStats reports every pool, including those that are off (size 0).
// Under tenant isolation the pools are each tenant's: tenant names whose
// to report ("" sums every tenant's).
func (r *Runtimes) PoolStats(tenant string) map[string]stream.PoolStats {
	out := r.pools.stats(r.cfg)
	if r.iso.Mode() != isolate.ModeTenant {
		return out
	}
	if tenant != "" {
		tenant = tenantKey(tenant)
	}
	per := r.tpools.stats(tenant)
	for name, st := range out {
		if got, ok := per[name]; ok {
			out[name] = got
			continue
		}
		switch {
		case name == "kernel" && r.env.PythonKernel != nil:
			st.Size = r.cfg.KernelPrewarm
		case name == JS && r.env.Node.Error == "", name == Python && r.env.PythonBackend == Native:
			st.Size = r.cfg.CodePrewarm
		}
		if tenant == "" {
			st.Size = 0 // no tenant has pools yet
		}
		out[name] = st
	}
	return out
}

// workdirProblem puts the working folder first when a runtime could not
// start because of it: a folder removed after start-up makes exec fail with
// ENOENT, which otherwise reads as if the interpreter were missing. A
// tenant's runtime (t not nil) sees dir in its own view, where it is the
// tenant's folder that aiod made, not the host's: the host's dir says
// nothing about it.
func workdirProblem(dir string, t *sandbox.Tenant, err error) error {
	if t != nil {
		return err
	}
	if dir == "" {
		if _, werr := os.Getwd(); werr != nil {
			return fmt.Errorf("the daemon's working folder is gone (%v), and runtimes start there: restart aiod in an existing folder or set --workdir: %w", werr, err)
		}
		return err
	}
	fi, serr := os.Stat(dir)
	switch {
	case serr != nil:
		return fmt.Errorf("the working folder %q (--workdir) is unusable (%v), so no runtime can start there: create it or set --workdir to an existing folder: %w", dir, serr, err)
	case !fi.IsDir():
		return fmt.Errorf("the working folder %q (--workdir) is not a folder, so no runtime can start there: %w", dir, err)
	}
	return err
}

// ownedByUs says whether fi is owned by this process's user.
func ownedByUs(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
