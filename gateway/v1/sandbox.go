package v1

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/stream"
)

// toolSpec is ToolSpec.
type toolSpec struct {
	Ver   *string  `json:"ver"`
	Bin   *string  `json:"bin"`
	Alias []string `json:"alias"`
}

// toolCategory is ToolCategory; tool is AvailableTool.
type toolCategory struct {
	Category string `json:"category"`
	Tools    []tool `json:"tools"`
}

type tool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// systemEnv is SystemEnv: occupied_ports are strings, as the SDK requires.
type systemEnv struct {
	OS            string   `json:"os"`
	OSVersion     string   `json:"os_version"`
	Arch          string   `json:"arch"`
	User          string   `json:"user"`
	HomeDir       string   `json:"home_dir"`
	Timezone      string   `json:"timezone"`
	Workspace     string   `json:"workspace"`
	OccupiedPorts []string `json:"occupied_ports"`
}

// sandboxResponse is SandboxResponse: flat, not the usual envelope; data
// is a text summary.
type sandboxResponse struct {
	Success   bool          `json:"success"`
	Message   string        `json:"message"`
	Data      string        `json:"data"`
	HomeDir   string        `json:"home_dir"`
	Workspace string        `json:"workspace"`
	Version   string        `json:"version"`
	Detail    sandboxDetail `json:"detail"`
}

type sandboxDetail struct {
	System  systemEnv             `json:"system"`
	Runtime map[string][]toolSpec `json:"runtime"` // python, nodejs
	Utils   []toolCategory        `json:"utils"`
}

// utilTools are the command-line tools reported when found on PATH.
var utilTools = []struct{ category, name, desc string }{
	{"code_execution", "python3", "Python interpreter"},
	{"code_execution", "node", "Node.js runtime"},
	{"code_execution", "npm", "Node.js package manager"},
	{"code_execution", "pip3", "Python package installer"},
	{"version_control", "git", "distributed version control"},
	{"network", "curl", "transfer data from or to a URL"},
	{"network", "wget", "download files from the web"},
	{"search", "rg", "ripgrep, recursive regex search"},
	{"search", "grep", "search text with regular expressions"},
	{"search", "find", "find files by name and attributes"},
	{"text", "jq", "JSON processor"},
	{"text", "sed", "stream editor"},
	{"text", "awk", "pattern scanning and processing"},
	{"archive", "tar", "tape archiver"},
	{"archive", "zip", "package and compress files"},
	{"archive", "unzip", "extract zip archives"},
}

func (v *Surface) sandbox(ctx *fasthttp.RequestCtx) {
	home, _ := os.UserHomeDir()
	if home == "" {
		home = "/"
	}
	ws := os.Getenv("WORKSPACE")
	if ws == "" {
		ws = v.defaultCwd()
	}
	osName, osVer := osRelease()
	sys := systemEnv{
		OS: osName, OSVersion: osVer, Arch: hostArch(), User: hostUser(), HomeDir: home,
		Timezone: hostTimezone(), Workspace: ws, OccupiedPorts: listeningPorts(),
	}
	env := v.core.Env
	py := []toolSpec{}
	if pk := env.PythonKernel; pk != nil {
		py = append(py, toolSpec{Ver: nullIfEmpty(pk.Python), Bin: nullIfEmpty(pk.Interpreter),
			Alias: []string{"kernel:" + pk.Name}})
	}
	if env.Python.Error == "" && env.Python.Path != "" {
		// The kernel's interpreter is often the native REPL's too: one
		// interpreter is listed once, with both names.
		alias := filepath.Base(env.Python.Path)
		if i := sameTool(py, env.Python.Path, env.Python.Version); i >= 0 {
			py[i].Alias = append(py[i].Alias, alias)
		} else {
			py = append(py, toolSpec{Ver: nullIfEmpty(env.Python.Version), Bin: nullIfEmpty(env.Python.Path),
				Alias: []string{alias}})
		}
	}
	node := []toolSpec{}
	if env.Node.Error == "" && env.Node.Path != "" {
		ver := strings.TrimPrefix(env.Node.Version, "v")
		node = append(node, toolSpec{Ver: nullIfEmpty(ver), Bin: nullIfEmpty(env.Node.Path),
			Alias: []string{"node", "node" + v.nodeMajor()}})
	}
	cats := map[string]*toolCategory{}
	var order []string
	for _, t := range utilTools {
		if _, err := exec.LookPath(t.name); err != nil {
			continue
		}
		c := cats[t.category]
		if c == nil {
			c = &toolCategory{Category: t.category}
			cats[t.category] = c
			order = append(order, t.category)
		}
		c.Tools = append(c.Tools, tool{Name: t.name, Description: t.desc})
	}
	utils := []toolCategory{}
	for _, name := range order {
		utils = append(utils, *cats[name])
	}
	d := sandboxDetail{System: sys, Runtime: map[string][]toolSpec{"python": py, "nodejs": node}, Utils: utils}
	api.WriteJSON(ctx, fasthttp.StatusOK, sandboxResponse{
		Success: true, Message: "ok", Data: summary(d), HomeDir: home, Workspace: ws, Version: v.version, Detail: d,
	})
}

// sameTool is the index of the entry of ts that is the interpreter bin
// (the same file, symlinks followed) at version ver, or -1.
func sameTool(ts []toolSpec, bin, ver string) int {
	real := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return p
	}
	for i, t := range ts {
		if t.Bin != nil && real(*t.Bin) == real(bin) && (t.Ver == nil || *t.Ver == ver) {
			return i
		}
	}
	return -1
}

// summary is the human-readable text of data.
func summary(d sandboxDetail) string {
	var b strings.Builder
	s := d.System
	fmt.Fprintf(&b, "System: %s %s (%s), user %s, home %s, timezone %s\n", s.OS, s.OSVersion, s.Arch, s.User, s.HomeDir, s.Timezone)
	fmt.Fprintf(&b, "Workspace: %s\n", s.Workspace)
	for _, lang := range []string{"python", "nodejs"} {
		for _, t := range d.Runtime[lang] {
			ver, bin := "", ""
			if t.Ver != nil {
				ver = *t.Ver
			}
			if t.Bin != nil {
				bin = *t.Bin
			}
			fmt.Fprintf(&b, "Runtime: %s %s at %s\n", lang, ver, bin)
		}
	}
	for _, c := range d.Utils {
		names := make([]string, len(c.Tools))
		for i, t := range c.Tools {
			names[i] = t.Name
		}
		fmt.Fprintf(&b, "Tools (%s): %s\n", c.Category, strings.Join(names, ", "))
	}
	if len(s.OccupiedPorts) > 0 {
		fmt.Fprintf(&b, "Listening ports: %s\n", strings.Join(s.OccupiedPorts, ", "))
	}
	return b.String()
}

// osRelease reads NAME and VERSION_ID from /etc/os-release.
func osRelease() (name, version string) {
	name, version = runtime.GOOS, ""
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return name, version
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, val, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		val = strings.Trim(val, `"'`)
		switch k {
		case "NAME":
			name = val
		case "VERSION_ID":
			version = val
		}
	}
	return name, version
}

func hostArch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return runtime.GOARCH
}

func hostUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// timezone is $TZ, /etc/timezone, the /etc/localtime link, or UTC.
func hostTimezone() string {
	if tz := os.Getenv("TZ"); tz != "" {
		return strings.TrimPrefix(tz, ":")
	}
	if b, err := os.ReadFile("/etc/timezone"); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	if p, err := os.Readlink("/etc/localtime"); err == nil {
		if _, after, ok := strings.Cut(p, "zoneinfo/"); ok {
			return after
		}
	}
	return "UTC"
}

// listeningPorts lists the TCP ports in LISTEN state on this host (IPv4 and
// IPv6), as decimal strings in ascending order.
func listeningPorts() []string {
	seen := map[int]bool{}
	for _, p := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if i == 0 || len(f) < 4 || f[3] != "0A" { // 0A is TCP_LISTEN
				continue
			}
			_, port, ok := strings.Cut(f[1], ":")
			if !ok {
				continue
			}
			if n, err := strconv.ParseUint(port, 16, 16); err == nil {
				seen[int(n)] = true
			}
		}
	}
	ports := make([]int, 0, len(seen))
	for p := range seen {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = strconv.Itoa(p)
	}
	return out
}

type pkgInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// pkgTTL is how long a package listing is reused.
const pkgTTL = 30 * time.Second

// packages runs list (bounded by 20 s) at most once per pkgTTL per key;
// callers asking while it runs wait for its answer.
// pkgListTimeout bounds one listing of the installed packages (pip, npm):
// npm alone takes 0.1 s on an idle machine and was killed at 20 s on a
// 2-core one loaded a hundred times over (its first answer is shared by
// every caller, then cached).
const pkgListTimeout = time.Minute

func (v *Surface) packages(key string, list func(context.Context) ([]pkgInfo, error)) ([]pkgInfo, error) {
	return share(v.core, &v.pkgMu, v.pkgCache, key, pkgTTL, pkgListTimeout, func(ctx context.Context) ([]pkgInfo, error) {
		pkgs, err := list(ctx)
		if err != nil {
			return nil, err
		}
		sort.Slice(pkgs, func(i, j int) bool { return strings.ToLower(pkgs[i].Name) < strings.ToLower(pkgs[j].Name) })
		return pkgs, nil
	})
}

// shared is the result of one slow look-up (a subprocess), shared by
// every caller that asks for its key while it runs, and reused after.
type shared[T any] struct {
	done chan struct{} // closed once at, val and err are set; they do not change after
	at   time.Time
	val  T
	err  error
}

// stale reports whether c should be run again: it is done, and failed or
// is older than ttl (0: never too old). One still running is not stale.
func (c *shared[T]) stale(ttl time.Duration) bool {
	select {
	case <-c.done:
		return c.err != nil || (ttl > 0 && time.Since(c.at) >= ttl)
	default:
		return false
	}
}

// background is where share runs its look-ups: the call core (its Go
// goroutines are waited for at shutdown, its Ctx ends then).
type background interface {
	Ctx() context.Context
	Go(func()) bool
}

// share returns m[key]'s value, running run when there is none (or a
// stale one, see stale) and none running. run gets a context of its own,
// bounded by bound and by the daemon's life, on a goroutine of bg's: mu
// guards m only and is never held while run runs, so a slow look-up holds
// up no other key, and a caller gone stops nobody's wait.
func share[T any](bg background, mu *sync.Mutex, m map[string]*shared[T], key string, ttl, bound time.Duration, run func(context.Context) (T, error)) (T, error) {
	mu.Lock()
	c := m[key]
	if c == nil || c.stale(ttl) {
		c = &shared[T]{done: make(chan struct{})}
		started := bg.Go(func() {
			ctx, cancel := context.WithTimeout(bg.Ctx(), bound)
			defer cancel()
			val, err := run(ctx)
			c.at, c.val, c.err = time.Now(), val, err
			close(c.done)
		})
		if !started {
			mu.Unlock()
			var zero T
			return zero, stream.ErrShuttingDown
		}
		m[key] = c
	}
	mu.Unlock()
	select {
	case <-c.done:
		return c.val, c.err
	case <-bg.Ctx().Done():
		var zero T
		return zero, stream.ErrShuttingDown
	}
}

// pythonPkgScript prints the installed distributions as JSON.
const pythonPkgScript = `import json, importlib.metadata as m
seen = {}
for d in m.distributions():
    n = d.metadata["Name"]
    if n and n.lower() not in seen:
        seen[n.lower()] = {"name": n, "version": d.version}
print(json.dumps(list(seen.values())))`

func (v *Surface) pythonPackages(ctx *fasthttp.RequestCtx) {
	py := v.core.Env.Python.Path
	if pk := v.core.Env.PythonKernel; pk != nil {
		py = pk.Interpreter
	}
	if py == "" {
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, "no Python found: "+v.core.Env.Python.Error)
		return
	}
	pkgs, err := v.packages("python", func(c context.Context) ([]pkgInfo, error) {
		// Isolated (-I: no script folder, PYTHON* or user site on the
		// path) and in /: aiod runs it as root, and a json.py planted in
		// its working folder would otherwise run with it.
		cmd := exec.CommandContext(c, py, "-I", "-c", pythonPkgScript)
		cmd.Dir = "/"
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("list Python packages with %s: %w", py, err)
		}
		var pkgs []pkgInfo
		if err := json.Unmarshal(out, &pkgs); err != nil {
			return nil, fmt.Errorf("list Python packages: %w", err)
		}
		return pkgs, nil
	})
	answerPackages(ctx, pkgs, err)
}

func (v *Surface) nodePackages(ctx *fasthttp.RequestCtx) {
	pkgs, err := v.packages("nodejs", v.globalNpmPackages)
	answerPackages(ctx, pkgs, err)
}

// globalNpmPackages lists the globally installed npm packages.
func (v *Surface) globalNpmPackages(c context.Context) ([]pkgInfo, error) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return nil, fmt.Errorf("list Node.js packages: npm not found on PATH")
	}
	cmd := exec.CommandContext(c, npm, "ls", "-g", "--depth=0", "--json")
	cmd.Dir = "/"
	out, err := cmd.Output()
	if len(out) == 0 && err != nil {
		return nil, fmt.Errorf("list Node.js packages with npm: %w", err)
	}
	var tree struct {
		Dependencies map[string]struct {
			Version string `json:"version"`
		} `json:"dependencies"`
	}
	if err := json.Unmarshal(out, &tree); err != nil {
		return nil, fmt.Errorf("list Node.js packages: %w", err)
	}
	pkgs := []pkgInfo{}
	for name, d := range tree.Dependencies {
		pkgs = append(pkgs, pkgInfo{Name: name, Version: d.Version})
	}
	return pkgs, nil
}

func answerPackages(ctx *fasthttp.RequestCtx, pkgs []pkgInfo, err error) {
	if err != nil {
		api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: false, Message: err.Error(), Data: nil})
		return
	}
	if pkgs == nil {
		pkgs = []pkgInfo{}
	}
	api.OK(ctx, pkgs)
}

// toolOutput runs a tool once (bounded by 10 s) and keeps its trimmed
// output: versions and folders that do not change while aiod runs. A
// failure is not kept.
func (v *Surface) toolOutput(key, name string, args ...string) (string, error) {
	return share(v.core, &v.pkgMu, v.tools, key, 0, 10*time.Second, func(ctx context.Context) (string, error) {
		path, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%s not found on PATH", name)
		}
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Dir = "/" // nothing of aiod's working folder on a tool's path
		b, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("run %s %s: %w", name, strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(b)), nil
	})
}
