// Package isolate confines the local runtimes aiod starts: a scrubbed
// environment, another user when aiod is root, and per-runtime memory, pids
// and CPU limits, by cgroup where aiod may create one (cgroup v1 memory, pids,
// cpu and freezer controllers, or cgroup v2 with those delegated), else by
// rlimits. The cgroup work is done by github.com/opencontainers/cgroups (runc's
// library). Only stream/backend uses it; kernel and replbridge get plain
// Options fields (an environment, a credential).
package isolate

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"

	"github.com/aiod/aiod/stream/backend/sandbox"
)

// Mechanisms, as Report.Mechanism names them.
const (
	CgroupV1 = "cgroup-v1"
	CgroupV2 = "cgroup-v2"
	Rlimit   = "rlimit"
	None     = "none" // no limit asked for
)

// Config says what to confine; zero values confine nothing but the
// environment, which is always scrubbed.
type Config struct {
	MemoryBytes int64 // per runtime; 0 is none
	// TotalMemoryBytes bounds all runtimes together (the memory limit of
	// their cgroups' parent, this daemon's folder); 0 is none.
	TotalMemoryBytes int64
	// TotalPids bounds the processes and threads of all runtimes together
	// (pids.max of their parent); 0 none.
	TotalPids int64
	Pids      int64 // processes and threads per runtime; 0 is none
	// TenantMemoryBytes and TenantPids bound all runtimes of one tenant
	// together (the group of its runtimes, tenantgroup.go); 0 is none.
	// They apply to runtimes started for a tenant (Apply with one).
	TenantMemoryBytes int64
	TenantPids        int64
	CPU               float64 // cores per runtime, as a CFS quota; 0 is none
	// RuntimesCPUWeight is the CPU weight of all runtimes together against
	// aiod's own process, when both want more than there is (cgroup v1:
	// see cpuweight.go); 0 leaves aiod in its cgroup and the runtimes'
	// parent at the default weight. Below 1, aiod weighs more.
	RuntimesCPUWeight float64
	// User runs runtimes as this account (a name, or uid[:gid]); "" is
	// aiod's own. Only root may set it.
	User string
	// EnvAllow names the variables of aiod's environment runtimes get: a
	// name, or a prefix ending in "*". Nil is DefaultEnvAllow.
	EnvAllow []string
	// Mechanism forces Rlimit (for tests of the fallback); "" picks cgroups
	// when they work.
	Mechanism string
	// Isolation is ModeTenant, ModeNone or ModeAuto (""): see tenant.go.
	// Tenant isolation needs StateDir, Workdir (the working folder as
	// runtimes see it), FirstUID-LastUID (both 0: the state directory's
	// own block, sandbox/uidauto.go) and Network (sandbox.NetworkNone or
	// NetworkHost).
	Isolation         string
	NoneBecause       string // why the caller set Isolation to none itself (shown in reports)
	StateDir          string
	Workdir           string
	FirstUID, LastUID uint32
	Network           string
	Egress            []sandbox.EgressRule // what runtimes may reach with Network "allow"
	Volumes           []sandbox.Volume     // host folders every tenant's view shows; only with tenant isolation
	// Ptys is how many pseudo-terminals a tenant's runtime may open, in a
	// devpts of its own (sandbox.View.Ptys); 0 keeps the host's.
	Ptys   int
	Logger *slog.Logger
}

// DefaultEnvAllow is what passes from aiod's environment to runtimes when
// --runtime-env-allow is not given.
var DefaultEnvAllow = []string{"PATH", "HOME", "LANG", "LC_*", "TZ", "TMPDIR", "TERM", "USER", "LOGNAME",
	"PYTHON*", "NODE_*", "JUPYTER_*", "MPLBACKEND", "KERNEL_*"}

// Isolator applies one Config to every runtime. Create it with New and
// release it with Close after every runtime is closed.
type Isolator struct {
	cfg       Config
	log       *slog.Logger
	mechanism string
	problem   string // why cgroups are not used, when they are not
	cred      *syscall.Credential
	userName  string
	home      string            // the runtime user's HOME, made by New
	parents   map[string]string // cgroup v1: controller -> this daemon's folder
	parent2   string            // cgroup v2: this daemon's folder
	total     cgroups.Manager   // this daemon's folder, when all runtimes together are limited
	mode      string            // ModeTenant or ModeNone
	why       string            // why mode is ModeNone
	tenants   *sandbox.Tenants  // nil unless mode is ModeTenant
	// cpuWeighed: this Isolator moved aiod into its weighted cpu group
	// (weighCPU); noWeight says why RuntimesCPUWeight is not in force.
	cpuWeighed bool
	noWeight   string
	tg         tenantGroups
}

// New resolves the user, makes its home folder, removes cgroups left by
// dead aiod processes and checks that cgroups can be made here; when they
// cannot, limits fall back to rlimits and Report says so.
func New(cfg Config) (*Isolator, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.EnvAllow == nil {
		cfg.EnvAllow = DefaultEnvAllow
	}
	if cfg.MemoryBytes < 0 || cfg.Pids < 0 || cfg.CPU < 0 || cfg.TotalMemoryBytes < 0 || cfg.TotalPids < 0 || cfg.TenantMemoryBytes < 0 || cfg.TenantPids < 0 {
		return nil, errors.New("runtime limits must not be negative")
	}
	is := &Isolator{cfg: cfg, log: cfg.Logger, mechanism: None}
	if err := is.setUpTenants(); err != nil {
		return nil, err
	}
	if cfg.User != "" {
		u, err := LookupUser(cfg.User)
		if err != nil {
			return nil, err
		}
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("runtime user %q: aiod runs as uid %d, and only root can start processes as another user", cfg.User, os.Geteuid())
		}
		is.cred, is.userName = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}, u.Name
		home, err := os.MkdirTemp("", "aiod-runtime-home-")
		if err == nil {
			err = os.Chown(home, int(u.UID), int(u.GID))
		}
		if err != nil {
			return nil, fmt.Errorf("make a home folder for runtime user %q: %w", cfg.User, err)
		}
		is.home = home
	}
	if cfg.MemoryBytes == 0 && cfg.Pids == 0 && cfg.CPU == 0 && cfg.TotalMemoryBytes == 0 && cfg.TotalPids == 0 && cfg.TenantMemoryBytes == 0 && cfg.TenantPids == 0 {
		return is, nil
	}
	if cfg.Mechanism == Rlimit {
		is.mechanism, is.problem = Rlimit, "rlimits were asked for"
		return is, nil
	}
	if err := is.setUpCgroups(); err != nil {
		is.mechanism, is.problem = Rlimit, err.Error()
		is.log.Warn("runtime limits fall back to rlimits", "why", err)
	}
	return is, nil
}

// User is a resolved account.
type User struct {
	Name     string
	UID, GID uint32
}

// LookupUser resolves a name, a uid, or uid:gid.
func LookupUser(s string) (User, error) {
	idPart, gidPart, hasGid := strings.Cut(s, ":")
	if uid, err := strconv.ParseUint(idPart, 10, 32); err == nil {
		u := User{Name: idPart, UID: uint32(uid), GID: uint32(uid)}
		if pu, err := user.LookupId(idPart); err == nil {
			u.Name = pu.Username
			if g, err := strconv.ParseUint(pu.Gid, 10, 32); err == nil {
				u.GID = uint32(g)
			}
		}
		if hasGid {
			g, err := strconv.ParseUint(gidPart, 10, 32)
			if err != nil {
				return User{}, fmt.Errorf("runtime user %q: gid %q is not a number", s, gidPart)
			}
			u.GID = uint32(g)
		}
		if u.UID == 0 {
			return User{}, fmt.Errorf("runtime user %q is root: give an unprivileged account", s)
		}
		return u, nil
	}
	if hasGid {
		return User{}, fmt.Errorf("runtime user %q: want a name, a uid or uid:gid", s)
	}
	pu, err := user.Lookup(s)
	if err != nil {
		return User{}, fmt.Errorf("runtime user %q: no such user", s)
	}
	uid, _ := strconv.ParseUint(pu.Uid, 10, 32)
	gid, _ := strconv.ParseUint(pu.Gid, 10, 32)
	if uid == 0 {
		return User{}, fmt.Errorf("runtime user %q is root: give an unprivileged account", s)
	}
	return User{Name: pu.Username, UID: uint32(uid), GID: uint32(gid)}, nil
}

// Credential is what runtimes run as; nil is aiod's own user.
func (is *Isolator) Credential() *syscall.Credential {
	if is == nil {
		return nil
	}
	return is.cred
}

// Environ is the base environment of every runtime: the variables of env
// (aiod's own, os.Environ()) that the allow list names, never aiod's own
// settings and secrets (AIO_*, JWT_PUBLIC_KEY), and with a runtime user its
// HOME, USER, LOGNAME, IPYTHONDIR and MPLCONFIGDIR.
func (is *Isolator) Environ(env []string) []string {
	allow := DefaultEnvAllow
	if is != nil {
		allow = is.cfg.EnvAllow
	}
	out := FilterEnv(env, allow)
	if is != nil && is.tenants != nil {
		return tenantEnviron(out, is.tenants.Network() == sandbox.NetworkAllow)
	}
	if is != nil && is.cred != nil {
		out = append(out, "HOME="+is.home, "USER="+is.userName, "LOGNAME="+is.userName,
			"IPYTHONDIR="+filepath.Join(is.home, ".ipython"), "MPLCONFIGDIR="+filepath.Join(is.home, ".matplotlib"))
	}
	return out
}

// FilterEnv keeps the entries of env whose name allow lists (a name, or a
// prefix ending in "*"), less aiod's own variables.
func FilterEnv(env, allow []string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if secret(name) || !allowed(name, allow) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// secret says that name is one of aiod's settings, which never reach user
// code whatever the allow list says: AIO_TOKEN, AIO_JWT_*, AIO_JUPYTER_TOKEN
// and every other AIO_*, and JWT_PUBLIC_KEY.
func secret(name string) bool {
	return strings.HasPrefix(name, "AIO_") || name == "JWT_PUBLIC_KEY"
}

func allowed(name string, allow []string) bool {
	for _, a := range allow {
		if p, ok := strings.CutSuffix(a, "*"); ok {
			if strings.HasPrefix(name, p) {
				return true
			}
		} else if a == name {
			return true
		}
	}
	return false
}

// Close removes this daemon's cgroup folders (killing what is left in them)
// and the runtime user's home folder.
func (is *Isolator) Close() error {
	if is == nil {
		return nil
	}
	var errs []error
	for _, p := range is.parents {
		if parentsInUse.drop(p) {
			errs = append(errs, removeTree(p))
		}
	}
	if is.parent2 != "" && parentsInUse.drop(is.parent2) {
		errs = append(errs, removeTree(is.parent2))
	}
	if is.cpuWeighed {
		is.cpuWeighed = false
		errs = append(errs, unweighCPU())
	}
	if is.home != "" {
		errs = append(errs, os.RemoveAll(is.home))
	}
	if is.tenants != nil {
		errs = append(errs, is.tenants.Close())
	}
	return errors.Join(errs...)
}

// v1Controllers are the cgroup v1 controllers a runtime's group joins; the
// freezer (when mounted) stops a fork loop while its processes are killed.
var v1Controllers = []string{"memory", "pids", "cpu", "freezer"}

// groupSeq names runtimes' groups: one sequence for the process, since
// every Isolator of a process (a test's several gateways) makes them
// under the same daemon folder.
var groupSeq atomic.Uint64

// parentsInUse counts the Isolators of this process that use each
// parent folder: the last one to close removes it (and kills what is
// left in it), not the first.
var parentsInUse = parentRefs{n: map[string]int{}}

type parentRefs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *parentRefs) hold(dir string) {
	r.mu.Lock()
	r.n[dir]++
	r.mu.Unlock()
}

// drop counts one user less of dir and says whether it was the last.
func (r *parentRefs) drop(dir string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n[dir]--; r.n[dir] > 0 {
		return false
	}
	delete(r.n, dir)
	return true
}

// daemonDir is the name of this daemon's folder under its own cgroup.
func daemonDir(pid int) string { return "aiod-" + strconv.Itoa(pid) }

func (is *Isolator) setUpCgroups() error {
	if cgroups.IsCgroup2UnifiedMode() {
		own, err := cgroups.GetOwnCgroupPath("")
		if err != nil {
			return fmt.Errorf("cgroup v2: find aiod's own cgroup: %w", err)
		}
		own = ownV2(own)
		cleanStale(own)
		dir := filepath.Join(own, daemonDir(os.Getpid()))
		res := is.totalResources()
		m, err := fs2.NewManager(&cgroups.Cgroup{Resources: res}, dir)
		if err == nil {
			err = m.Apply(-1)
		}
		if err == nil {
			err = needControllers(dir)
		}
		if err == nil {
			err = m.Set(res)
		}
		if is.cfg.TotalMemoryBytes > 0 || is.cfg.TotalPids > 0 {
			is.total = m
		}
		if err != nil {
			_ = cgroups.RemovePath(dir)
			return fmt.Errorf("cgroup v2: cannot make runtime groups under %s (memory, pids and cpu must be delegated to aiod): %w", own, err)
		}
		is.mechanism, is.parent2 = CgroupV2, dir
		parentsInUse.hold(dir)
		if is.cfg.RuntimesCPUWeight > 0 {
			is.noWeight = "not made on cgroup v2: aiod and its runtimes' parent keep the default weight"
		}
		return nil
	}
	is.parents = map[string]string{}
	for _, c := range v1Controllers {
		own, err := cgroups.GetOwnCgroupPath(c)
		if err != nil {
			if c == "freezer" || (c == "cpu" && is.cfg.CPU == 0) {
				continue
			}
			return fmt.Errorf("cgroup v1: no %s controller: %w", c, err)
		}
		if c == "cpu" {
			own = cpuHome(own)
		}
		cleanStale(own)
		dir := filepath.Join(own, daemonDir(os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			is.Close() //nolint:errcheck // undoing a partial set-up
			is.parents = nil
			return fmt.Errorf("cgroup v1: make %s: %w", dir, err)
		}
		is.parents[c] = dir
		parentsInUse.hold(dir)
		if c == "cpu" && is.cfg.RuntimesCPUWeight > 0 {
			rt, err := weighCPU(own, dir, is.cfg.RuntimesCPUWeight)
			if err != nil {
				// The runtimes still get their groups (and any quota).
				is.noWeight = err.Error()
				is.log.Warn("runtimes' CPU weight not set; aiod keeps the default layout", "why", err)
				continue
			}
			parentsInUse.drop(dir)
			parentsInUse.hold(rt)
			is.parents[c], is.cpuWeighed = rt, true
		}
	}
	if is.cfg.TotalMemoryBytes > 0 || is.cfg.TotalPids > 0 {
		res := is.totalResources()
		m, err := fs.NewManager(&cgroups.Cgroup{Resources: res}, map[string]string{"memory": is.parents["memory"], "pids": is.parents["pids"]})
		if err == nil {
			err = m.Set(res)
		}
		if err != nil {
			is.Close() //nolint:errcheck // undoing a partial set-up
			is.parents = nil
			return fmt.Errorf("cgroup v1: limit all runtimes to %d bytes and %d processes: %w", is.cfg.TotalMemoryBytes, is.cfg.TotalPids, err)
		}
		is.total = m
	}
	is.mechanism = CgroupV1
	return nil
}

// totalResources is the limit of all runtimes together, on their parent.
func (is *Isolator) totalResources() *cgroups.Resources {
	return is.memPids(is.cfg.TotalMemoryBytes, is.cfg.TotalPids)
}

// memPids is a group's memory and process limits (0: none). With cgroup
// v1's swap accounting the memory limit bounds swap too: no escape into
// it.
func (is *Isolator) memPids(mem, pids int64) *cgroups.Resources {
	res := &cgroups.Resources{}
	if mem > 0 {
		res.Memory = mem
		if !cgroups.IsCgroup2UnifiedMode() && cgroups.PathExists(filepath.Join(is.parents["memory"], "memory.memsw.limit_in_bytes")) {
			res.MemorySwap = mem
		}
	}
	if pids > 0 {
		res.PidsLimit = &pids
	}
	return res
}

// makeGroup makes the group name (a path under this daemon's folder, in
// every controller it uses) with res in force, and returns its manager.
func (is *Isolator) makeGroup(name string, res *cgroups.Resources) (cgroups.Manager, error) {
	// The cgroup v1 manager's Set detects the blkio files into package
	// state without a lock: two groups made at once race on it.
	makeMu.Lock()
	defer makeMu.Unlock()
	cg := &cgroups.Cgroup{Resources: res}
	var (
		m   cgroups.Manager
		err error
	)
	if is.mechanism == CgroupV2 {
		m, err = fs2.NewManager(cg, filepath.Join(is.parent2, name))
	} else {
		paths := map[string]string{}
		for c, p := range is.parents {
			paths[c] = filepath.Join(p, name)
		}
		m, err = fs.NewManager(cg, paths)
	}
	if err == nil {
		err = m.Apply(-1) // make the group
	}
	if err == nil {
		err = m.Set(res)
	}
	if err != nil {
		if m != nil {
			_ = m.Destroy()
		}
		return nil, err
	}
	return m, nil
}

// makeMu makes one group at a time (makeGroup).
var makeMu sync.Mutex

// TotalLimited reports whether all runtimes together have a memory limit.
func (is *Isolator) TotalLimited() bool {
	return is != nil && is.total != nil && is.cfg.TotalMemoryBytes > 0
}

// ownV2 maps a cgroup v2 own path to aiod's cgroup folder (GetOwnCgroupPath
// gives the mount point for the "" subsystem).
func ownV2(mount string) string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return mount
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mount, rest)
		}
	}
	return mount
}

func needControllers(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	have := strings.Fields(string(data))
	for _, c := range []string{"memory", "pids"} {
		found := false
		for _, h := range have {
			found = found || h == c
		}
		if !found {
			return fmt.Errorf("controller %s is not enabled", c)
		}
	}
	return nil
}

// cleanStale removes the folders of aiod processes that are gone, killing
// what runs in them.
func cleanStale(own string) {
	ents, err := os.ReadDir(own)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "aiod-")
		pid, err := strconv.Atoi(rest)
		if !ok || err != nil || !e.IsDir() || pid == os.Getpid() {
			continue
		}
		if unix.Kill(pid, 0) == nil || errors.Is(unix.Kill(pid, 0), unix.EPERM) {
			continue // alive
		}
		_ = removeTree(filepath.Join(own, e.Name()))
	}
}

// removeTree kills every process in the groups under dir and removes them.
func removeTree(dir string) error {
	if pids, err := cgroups.GetAllPids(dir); err == nil {
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
	}
	return cgroups.RemovePath(dir)
}

// Limits are one runtime's: its cgroup, or the rlimits set on its process.
// Close after the runtime's process has exited.
type Limits struct {
	is   *Isolator
	mgr  cgroups.Manager // nil with rlimits
	dir  string          // a folder of the group that lists its processes
	once sync.Once
	oom  atomic.Uint64 // oom kills counted before the group was removed
	// oomFile is the group's file that counts its OOM kills, kept open:
	// one pread is a fraction of an open, read and close each time the
	// count is read (at every execution with cgroup v2, after an OOM
	// notification with v1). nil: ask the manager.
	oomFile *os.File
	// oomEvents is an eventfd the kernel signals when the group (or one
	// above it) runs out of memory (cgroup v1's notification on
	// memory.oom_control), -1 without one: OOMKillsSoFar reads the count
	// again only after a signal. Guarded by evMu, which Close takes.
	oomEvents int
	evMu      sync.Mutex
	lastEvent atomic.Int64 // unix ns of the last signal seen
	full      atomic.Bool  // ReachedOwnLimit seen before the group was removed
	tenant    string       // the tenant group it is in; "" none
	err       error
}

// oomSettle is how long after an OOM notification OOMKillsSoFar keeps
// reading the count: the notification comes when the group runs out of
// memory, the kill (and the count) right after.
const oomSettle = 2 * time.Second

// Apply puts the process pid (and what it starts from now on) under the
// limits, before it runs user code. With a tenant t (nil: none) the
// runtime's group is made in t's group, which weighs and bounds all of
// t's runtimes together (tenantgroup.go). It is Prepare, then Join.
func (is *Isolator) Apply(pid int, t *sandbox.Tenant) (*Limits, error) {
	l, err := is.Prepare(t)
	if err != nil {
		return nil, err
	}
	if err := l.Join(pid); err != nil {
		return nil, err
	}
	return l, nil
}

// Prepare makes the limits of a runtime of tenant t (nil: none) before its
// process exists: with cgroups, its group with every limit in force. Join
// puts the process in; Close undoes either.
func (is *Isolator) Prepare(t *sandbox.Tenant) (*Limits, error) {
	l := &Limits{is: is, oomEvents: -1}
	if is.mechanism == None || is.mechanism == Rlimit {
		return l, nil
	}
	if t != nil {
		name, err := is.holdTenant(t)
		if err != nil {
			return nil, err
		}
		l.tenant = name
	}
	if err := is.makeRuntimeGroup(l); err != nil {
		if l.tenant != "" {
			_ = is.releaseTenant(l.tenant)
		}
		return nil, err
	}
	return l, nil
}

// Join puts the process pid under l; on failure l is undone (its group
// removed) and must not be used again.
func (l *Limits) Join(pid int) error {
	switch l.is.mechanism {
	case None:
		return nil
	case Rlimit:
		return l.is.applyRlimits(pid)
	}
	if err := l.mgr.Apply(pid); err != nil {
		l.once.Do(func() {
			l.closeOOM()
			_ = l.mgr.Destroy()
			if l.tenant != "" {
				_ = l.is.releaseTenant(l.tenant)
			}
		})
		return fmt.Errorf("put runtime (pid %d) in its cgroup: %w", pid, err)
	}
	return nil
}

// ChargeFile is the cgroup.procs file of l's memory group with cgroup v1,
// where a process that forks the runtime's process stays while it forks,
// so that what fork() copies for the child is charged to the runtime
// (kernel.Options.Charge); "" otherwise.
func (l *Limits) ChargeFile() string {
	if l.is.mechanism != CgroupV1 || l.mgr == nil || l.mgr.Path("memory") == "" {
		return ""
	}
	return filepath.Join(l.mgr.Path("memory"), "cgroup.procs")
}

// ChargeHome is the cgroup.procs file of aiod's own memory group with
// cgroup v1 (where the processes aiod starts are, its kernel templates
// among them), "" otherwise: a template goes back there after a fork
// charged to a runtime (ChargeFile).
func (is *Isolator) ChargeHome() string {
	if is.mechanism != CgroupV1 || is.parents["memory"] == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(is.parents["memory"]), "cgroup.procs")
}

// MemoryUncharged reports whether a memory limit is in force that a kernel
// template's forks would escape: with cgroup v2 aiod does not move the
// template into a kernel's group (ChargeHome is ""), so what fork() copies
// at once would be charged to the template's group, outside every limit.
func (is *Isolator) MemoryUncharged() bool {
	return is.mechanism == CgroupV2 && (is.cfg.MemoryBytes > 0 || is.cfg.TotalMemoryBytes > 0 || is.cfg.TenantMemoryBytes > 0)
}

// makeRuntimeGroup makes the runtime's own group (in l.tenant's, if any)
// with its limits, and opens its OOM count.
func (is *Isolator) makeRuntimeGroup(l *Limits) error {
	res := is.memPids(is.cfg.MemoryBytes, is.cfg.Pids)
	if is.cfg.CPU > 0 {
		res.CpuPeriod = 100000
		res.CpuQuota = int64(is.cfg.CPU * 100000)
	}
	var err error
	// Limits in place before the process joins.
	l.mgr, err = is.makeGroup(filepath.Join(l.tenant, strconv.FormatUint(groupSeq.Add(1), 10)), res)
	if err != nil {
		return fmt.Errorf("make the runtime's cgroup: %w", err)
	}
	// The v1 manager lists processes from the devices controller,
	// which aiod does not use; any of the group's folders lists them.
	for _, c := range []string{"", "pids", "memory", "cpu", "freezer"} {
		if p := l.mgr.Path(c); p != "" && l.dir == "" {
			l.dir = p
		}
	}
	oomPath := filepath.Join(l.dir, "memory.events")
	if is.mechanism != CgroupV2 {
		oomPath = filepath.Join(l.mgr.Path("memory"), "memory.oom_control")
	}
	if f, err := os.Open(oomPath); err == nil {
		l.oomFile = f
		if is.mechanism == CgroupV1 {
			l.oomEvents = oomEventfd(f, filepath.Join(l.mgr.Path("memory"), "cgroup.event_control"))
		}
	}
	return nil
}

// oomEventfd registers a non-blocking eventfd for the OOM notifications of
// the v1 group whose memory.oom_control is f; -1 when it cannot.
func oomEventfd(f *os.File, control string) int {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1
	}
	rc, err := f.SyscallConn()
	if err == nil {
		err = rc.Control(func(ofd uintptr) {
			err = os.WriteFile(control, []byte(strconv.Itoa(efd)+" "+strconv.FormatUint(uint64(ofd), 10)), 0)
		})
	}
	if err != nil {
		_ = unix.Close(efd)
		return -1
	}
	return efd
}

func (is *Isolator) applyRlimits(pid int) error {
	if n := is.cfg.MemoryBytes; n > 0 {
		// RLIMIT_DATA, not RLIMIT_AS: V8 reserves large address ranges
		// it never touches, which RLIMIT_AS counts.
		if err := unix.Prlimit(pid, unix.RLIMIT_DATA, &unix.Rlimit{Cur: uint64(n), Max: uint64(n)}, nil); err != nil {
			return fmt.Errorf("set RLIMIT_DATA on runtime (pid %d): %w", pid, err)
		}
	}
	if n := is.cfg.Pids; n > 0 && is.cred != nil {
		if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: uint64(n), Max: uint64(n)}, nil); err != nil {
			return fmt.Errorf("set RLIMIT_NPROC on runtime (pid %d): %w", pid, err)
		}
	}
	return nil
}

// OOMKills is how many processes of the runtime its memory limit killed:
// the cgroup's oom_kill count (memory.oom_control in v1, memory.events in
// v2). It is 0 with rlimits, which make allocations fail instead.
func (l *Limits) OOMKills() uint64 {
	if l == nil || l.mgr == nil {
		return 0
	}
	if n, err := l.readOOMKills(); err == nil && n > l.oom.Load() {
		l.oom.Store(n)
	}
	return l.oom.Load()
}

// OOMKillsSoFar is OOMKills without a read of the group's file when
// nothing can have changed it: with an OOM notification registered (cgroup
// v1), the count is read again only when a notification came (or less than
// oomSettle ago), since a kill in the group always follows one; without,
// it is OOMKills. One non-blocking read of an eventfd instead of a cgroup
// file at every execution.
func (l *Limits) OOMKillsSoFar() uint64 {
	if l == nil || l.mgr == nil {
		return 0
	}
	l.evMu.Lock()
	fd := l.oomEvents
	if fd >= 0 {
		var b [8]byte
		if n, _ := unix.Read(fd, b[:]); n == len(b) {
			l.lastEvent.Store(time.Now().UnixNano())
		}
	}
	l.evMu.Unlock()
	if fd < 0 || time.Since(time.Unix(0, l.lastEvent.Load())) < oomSettle {
		return l.OOMKills()
	}
	return l.oom.Load()
}

// readOOMKills reads the group's count: the line "oom_kill N" of its
// oomFile read again from the start (cgroup files are generated anew
// at each read from offset 0), or the manager's answer without one.
func (l *Limits) readOOMKills() (uint64, error) {
	if l.oomFile == nil {
		return l.mgr.OOMKillCount()
	}
	var (
		buf  [512]byte
		n    int
		perr error
	)
	// One pread (File.ReadAt would make a second to see the end).
	rc, err := l.oomFile.SyscallConn()
	if err == nil {
		err = rc.Read(func(fd uintptr) bool {
			n, perr = unix.Pread(int(fd), buf[:], 0)
			return true
		})
	}
	if err = errors.Join(err, perr); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no oom_kill line in " + l.oomFile.Name())
}

// memSlack is how far short of a memory limit a group's peak may stop
// and still count as reaching it: charges fail a few pages short.
const memSlack = 4 << 20

// ReachedOwnLimit reports whether the runtime's group used its own memory
// limit up (its peak usage, memory.max_usage_in_bytes in v1, memory.peak
// in v2, within a little of the limit): the sign that a kill by the OOM
// killer was its own limit's, not the limit of all runtimes together,
// under which a group never gets that far. The answer is kept once the
// group is gone.
func (l *Limits) ReachedOwnLimit() bool {
	if l == nil || l.mgr == nil || l.is.cfg.MemoryBytes == 0 {
		return false
	}
	if st, err := l.mgr.GetStats(); err == nil {
		if int64(st.MemoryStats.Usage.MaxUsage) >= l.is.cfg.MemoryBytes-memSlack {
			l.full.Store(true)
		}
	}
	return l.full.Load()
}

// ReachedTenantLimit reports whether the runtime's tenant group used the
// tenant's memory quota up (its peak within a little of it): a kill by the
// OOM killer that the runtime's own limit does not explain was the
// tenant's quota's. Ask before Close: the group may go with it.
func (l *Limits) ReachedTenantLimit() bool {
	if l == nil || l.tenant == "" || l.is.cfg.TenantMemoryBytes == 0 {
		return false
	}
	return l.is.tenantPeak(l.tenant) >= l.is.cfg.TenantMemoryBytes-memSlack
}

// Close kills whatever is left in the runtime's group (children it left in
// other process groups, a fork loop) and removes the group. The runtime's
// own process should have exited. It is idempotent.
func (l *Limits) Close() error {
	if l == nil || l.mgr == nil {
		return nil
	}
	l.once.Do(func() {
		l.OOMKills() // keep the counts: the group goes
		l.ReachedOwnLimit()
		l.closeOOM()
		l.err = l.killAll()
		if err := l.mgr.Destroy(); err != nil {
			l.err = errors.Join(l.err, err)
		}
		if l.tenant != "" {
			l.err = errors.Join(l.err, l.is.releaseTenant(l.tenant))
		}
	})
	return l.err
}

// closeOOM closes the group's OOM count and its eventfd.
func (l *Limits) closeOOM() {
	if l.oomFile != nil {
		_ = l.oomFile.Close()
	}
	l.evMu.Lock()
	if l.oomEvents >= 0 {
		_ = unix.Close(l.oomEvents)
		l.oomEvents = -1
	}
	l.evMu.Unlock()
}

// killAll kills every process in the group and waits until it is empty.
// A fork loop cannot outrun the kills: the group's pids.max goes to 0
// first, so no process of it forks again, and on cgroup v2 cgroup.kill
// kills the whole group at once. The group is also frozen during each
// round of kills where that works (a v1 freeze can stay FREEZING on a
// loaded machine while processes keep appearing).
func (l *Limits) killAll() error {
	if p := l.mgr.Path("pids"); p != "" {
		_ = os.WriteFile(filepath.Join(p, "pids.max"), []byte("0"), 0)
	}
	if l.is.mechanism == CgroupV2 {
		_ = os.WriteFile(filepath.Join(l.dir, "cgroup.kill"), []byte("1"), 0)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := cgroups.GetAllPids(l.dir)
		if errors.Is(err, os.ErrNotExist) || err == nil && len(pids) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list the runtime cgroup's processes: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("runtime cgroup still holds %d processes after 5 s", len(pids))
		}
		frozen := l.mgr.Freeze(cgroups.Frozen) == nil
		if frozen {
			pids, _ = cgroups.GetAllPids(l.dir)
		}
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		if frozen {
			_ = l.mgr.Freeze(cgroups.Thawed)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Mechanism says what enforces the limits: CgroupV1, CgroupV2, Rlimit or None.
func (is *Isolator) Mechanism() string { return is.mechanism }

// Report is what discovery shows of the isolation in force.
type Report struct {
	// Mechanism is what enforces the limits: cgroup-v1, cgroup-v2, rlimit,
	// or none when no limit is set.
	Mechanism   string `json:"mechanism"`
	MemoryBytes int64  `json:"memory_bytes"` // per runtime; 0 none
	// TotalMemoryBytes bounds all runtimes together; 0 none.
	TotalMemoryBytes int64 `json:"total_memory_bytes"`
	TotalPids        int64 `json:"total_pids"` // processes and threads of all runtimes together; 0 none
	// TenantMemoryBytes and TenantPids bound one tenant's runtimes
	// together (under tenant isolation); 0 none.
	TenantMemoryBytes int64    `json:"tenant_memory_bytes"`
	TenantPids        int64    `json:"tenant_pids"`
	Pids              int64    `json:"pids"`         // per runtime; 0 none
	CPU               float64  `json:"cpu"`          // cores per runtime; 0 none
	Enforced          []string `json:"enforced"`     // each limit in force, with what enforces it
	NotEnforced       []string `json:"not_enforced"` // each limit asked for that is not, and why
	// Fallback says why cgroups are not used, when limits fell back to
	// rlimits.
	Fallback string `json:"fallback,omitempty"`
	// User is who runtimes run as; nil is aiod's own user.
	User     *UserReport `json:"user"`
	EnvAllow []string    `json:"env_allow"` // variables passed from aiod's environment
	// TenantReport says how tenants are kept apart (its fields sit beside
	// these); set by the caller, per caller.
	TenantReport
}

// UserReport names the runtime user.
type UserReport struct {
	Name string `json:"name"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Home string `json:"home"`
}

// Report describes what is in force.
func (is *Isolator) Report() Report {
	c := is.cfg
	r := Report{Mechanism: is.mechanism, MemoryBytes: c.MemoryBytes, TotalMemoryBytes: c.TotalMemoryBytes, TotalPids: c.TotalPids, Pids: c.Pids, CPU: c.CPU,
		TenantMemoryBytes: c.TenantMemoryBytes, TenantPids: c.TenantPids,
		Enforced: []string{}, NotEnforced: []string{}, EnvAllow: append([]string{}, c.EnvAllow...)}
	if is.mechanism == Rlimit {
		r.Fallback = is.problem
	}
	if is.cred != nil {
		r.User = &UserReport{Name: is.userName, UID: is.cred.Uid, GID: is.cred.Gid, Home: is.home}
	}
	on := func(what, by string) { r.Enforced = append(r.Enforced, what+": "+by) }
	off := func(what, why string) { r.NotEnforced = append(r.NotEnforced, what+": "+why) }
	switch is.mechanism {
	case CgroupV1, CgroupV2:
		v := "cgroup v1 "
		mem, pids, cpu := "memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us"
		if is.mechanism == CgroupV2 {
			v, mem, cpu = "cgroup v2 ", "memory.max", "cpu.max"
		}
		if c.MemoryBytes > 0 {
			on("memory", v+mem+" (the kernel's OOM killer ends the runtime)")
		}
		if c.TotalMemoryBytes > 0 {
			on("total memory", v+mem+" on the runtimes' parent group (past it the kernel's OOM killer ends the largest runtime)")
		}
		if c.Pids > 0 {
			on("pids", v+pids+" (fork and thread creation fail past it)")
		}
		if c.TotalPids > 0 {
			on("total pids", v+pids+" on the runtimes' parent group (a fork or thread of any runtime fails past it, aiod's own are not counted)")
		}
		if c.CPU > 0 {
			on("cpu", v+cpu+" (a quota per 100 ms)")
		}
		switch {
		case is.mode != ModeTenant && (c.TenantMemoryBytes > 0 || c.TenantPids > 0):
			off("tenant quotas", "runtimes belong to a tenant only under --isolation tenant")
		case is.mode == ModeTenant:
			if c.TenantMemoryBytes > 0 {
				on("tenant memory", v+mem+" on each tenant's group of runtimes (past it the kernel's OOM killer ends the tenant's largest runtime)")
			}
			if c.TenantPids > 0 {
				on("tenant pids", v+pids+" on each tenant's group of runtimes")
			}
			on("tenant cpu share", v+"each tenant's runtimes in one group of the default weight: busy tenants share the runtimes' CPU equally, however many runtimes each runs")
		}
		if is.cpuWeighed {
			on("cpu weight", fmt.Sprintf("cgroup v1 cpu.shares: all runtimes together weigh %g× aiod's own process when both want more CPU than there is", c.RuntimesCPUWeight))
		} else if is.noWeight != "" {
			off("cpu weight", is.noWeight)
		}
	case Rlimit:
		if c.MemoryBytes > 0 {
			on("memory", "RLIMIT_DATA (allocations fail past it: Python raises MemoryError and the session lives; node aborts)")
		}
		if c.TotalMemoryBytes > 0 {
			off("total memory", "no rlimit bounds several processes together")
		}
		if c.TotalPids > 0 {
			off("total pids", "no rlimit bounds several processes together")
		}
		if c.TenantMemoryBytes > 0 || c.TenantPids > 0 {
			off("tenant quotas", "no rlimit bounds several processes together")
		}
		switch {
		case c.Pids > 0 && is.cred != nil:
			on("pids", "RLIMIT_NPROC of the runtime user, counted over all its processes, so shared by every runtime")
		case c.Pids > 0:
			off("pids", "RLIMIT_NPROC does not apply to root; set --runtime-user")
		}
		if c.CPU > 0 {
			off("cpu", "no rlimit gives a CPU quota")
		}
		if c.RuntimesCPUWeight > 0 {
			off("cpu weight", "no rlimit weighs processes")
		}
	}
	off("remote kernels", "runtimes on --jupyter-endpoint are limited by that server, not by aiod")
	return r
}
