package isolate

import (
	"fmt"
	"os"
	"strings"

	"github.com/aiod/aiod/stream/backend/sandbox"
)

// Isolation modes (Config.Isolation).
const (
	ModeAuto   = "auto"   // tenant where the machine allows it, else none
	ModeTenant = "tenant" // every tenant's runtimes in a sandbox of their own; refused where impossible
	ModeNone   = "none"   // every runtime shares the host, as aiod's user or --runtime-user
)

// DefaultTenant is the tenant of callers without credentials.
const DefaultTenant = "default"

// setUpTenants decides the isolation mode and, for tenant, makes the
// state directory and checks that sandboxes work here.
func (is *Isolator) setUpTenants() error {
	c := is.cfg
	mode := c.Isolation
	if mode == "" {
		mode = ModeAuto
	}
	switch mode {
	case ModeAuto, ModeTenant, ModeNone:
	default:
		return fmt.Errorf("isolation %q: want tenant, none or auto", mode)
	}
	is.mode = ModeNone
	if mode == ModeNone {
		is.why = "--isolation none"
		if c.NoneBecause != "" {
			is.why = c.NoneBecause
		}
		return volumesNeedTenants(c.Volumes, is.why)
	}
	why := is.tenantsImpossible()
	if why == "" {
		// The machine can: what stops the tenants now is a setting or a
		// conflict aiod cannot settle by itself (two daemons given one
		// --tenant-uids), and auto refuses it as tenant does instead of
		// running every tenant's code as aiod's user.
		ts, err := sandbox.NewTenants(sandbox.Config{StateDir: c.StateDir, FirstUID: c.FirstUID, LastUID: c.LastUID,
			Workdir: c.Workdir, Volumes: c.Volumes, Network: c.Network, Egress: c.Egress, Ptys: c.Ptys, Logger: is.log})
		if err != nil {
			return fmt.Errorf("tenant isolation: %w", err)
		}
		is.tenants, is.mode = ts, ModeTenant
		return nil
	}
	if mode == ModeTenant {
		return fmt.Errorf("--isolation tenant is not possible here: %s", why)
	}
	if err := volumesNeedTenants(c.Volumes, why); err != nil {
		return err
	}
	is.why = why
	is.log.Warn("tenant isolation is off: runtimes share the host's file system, network and user", "why", why)
	return nil
}

// volumesNeedTenants refuses volumes where tenant isolation is off (why):
// runtimes then see the host's folders where they are, and nothing can be
// made read-only for them.
func volumesNeedTenants(vols []sandbox.Volume, why string) error {
	if len(vols) == 0 {
		return nil
	}
	return fmt.Errorf("--volume needs tenant isolation, which is off here (%s): without a view of their own, runtimes see the host's folders where they are, and nothing can be made read-only for them", why)
}

// tenantsImpossible says why this machine or these settings cannot have
// tenant sandboxes; "" when they can.
func (is *Isolator) tenantsImpossible() string {
	c := is.cfg
	switch {
	case c.User != "":
		return "--runtime-user is set: under tenant isolation every tenant runs as a uid of its own (--tenant-uids); drop --runtime-user"
	case c.StateDir == "":
		return "no state directory (--state-dir)"
	case c.Workdir == "":
		return "no working folder"
	case os.Geteuid() != 0:
		return fmt.Sprintf("aiod runs as uid %d, and only root can make the namespaces and switch to tenant uids", os.Geteuid())
	}
	uid := c.FirstUID
	if uid == 0 {
		// The probe runs as the first uid of the block NewTenants will
		// claim; with none free NewTenants refuses, so probe as any.
		uid = sandbox.AutoFirstUID
		if first, _, err := sandbox.AutoUIDs(c.StateDir); err == nil {
			uid = first
		}
	}
	if err := sandbox.Probe(c.StateDir, uid); err != nil {
		return err.Error()
	}
	return ""
}

// Mode is ModeTenant or ModeNone, as decided at New.
func (is *Isolator) Mode() string {
	if is == nil {
		return ModeNone
	}
	return is.mode
}

// Tenant returns the sandbox of the tenant key ("" is DefaultTenant); nil
// without tenant isolation.
func (is *Isolator) Tenant(key string) (*sandbox.Tenant, error) {
	if is == nil || is.tenants == nil {
		return nil, nil
	}
	if key == "" {
		key = DefaultTenant
	}
	return is.tenants.Get(key)
}

// Tenants is the tenants' registry; nil without tenant isolation.
func (is *Isolator) Tenants() *sandbox.Tenants {
	if is == nil {
		return nil
	}
	return is.tenants
}

// tenantEnviron is what a tenant runtime's environment changes: its HOME
// and account, no TMPDIR of aiod's (the view has its own /tmp), and with
// the egress proxy, the proxy variables.
func tenantEnviron(env []string, proxy bool) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HOME", "USER", "LOGNAME", "TMPDIR", "IPYTHONDIR", "MPLCONFIGDIR",
			"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY":
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "HOME="+sandbox.HomePath, "USER="+sandbox.UserName, "LOGNAME="+sandbox.UserName)
	if proxy {
		for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			out = append(out, v+"="+sandbox.ProxyURL)
		}
		out = append(out, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
	}
	return out
}

// TenantReport is discovery's view of tenant isolation.
type TenantReport struct {
	// Mode is "tenant" or "none"; Why says why it is none, when it is.
	Mode string `json:"mode"`
	Why  string `json:"why,omitempty"`
	// The rest describe tenant mode.
	Tenant     string   `json:"tenant,omitempty"`     // the caller's tenant
	Namespaces []string `json:"namespaces,omitempty"` // what each runtime has of its own or its tenant's
	Network    string   `json:"network,omitempty"`    // none or host
	UIDs       string   `json:"uids,omitempty"`       // FIRST-LAST
	StateDir   string   `json:"state_dir,omitempty"`
	View       []string `json:"view,omitempty"`    // what a runtime sees
	Seccomp    string   `json:"seccomp,omitempty"` // the filter in force
	Landlock   string   `json:"landlock,omitempty"`
	Shared     []string `json:"shared"` // what tenants still share
}

// TenantReport describes tenant isolation for the caller whose tenant is
// tenant.
func (is *Isolator) TenantReport(tenant string) TenantReport {
	if is.tenants == nil {
		return TenantReport{Mode: ModeNone, Why: is.why, Shared: []string{
			"everything: the file system, the network and the user, among all callers' runtimes"}}
	}
	if tenant == "" {
		tenant = DefaultTenant
	}
	first, last := is.tenants.UIDRange()
	net := "its tenant's network namespace: its own loopback only, no route out (--runtime-network none)"
	switch is.tenants.Network() {
	case sandbox.NetworkHost:
		net = "the host's network (--runtime-network host)"
	case sandbox.NetworkAllow:
		allowed, refused := is.tenants.Egress()
		net = fmt.Sprintf("its tenant's network namespace, whose one way out is aiod's HTTP proxy at %s (HTTP_PROXY, HTTPS_PROXY), letting through only %s (--egress-allow); %d connections let through, %d refused so far",
			sandbox.ProxyURL, egressList(is.tenants.EgressRules()), allowed, refused)
	}
	r := TenantReport{
		Mode: ModeTenant, Tenant: tenant, Network: is.tenants.Network(),
		UIDs: fmt.Sprintf("%d-%d", first, last), StateDir: is.tenants.StateDir(),
		Namespaces: []string{"mount: its own", "ipc: its own", "uts: its own", "network: " + net,
			"pid: the host's, with /proc mounted hidepid=invisible: only its tenant's processes are visible, and other uids cannot be signalled"},
		View: []string{"/: the host's file system, read-only and nosuid",
			"/tmp, /var/tmp, /dev/shm, " + sandbox.HomePath + " (HOME) and " + is.cfg.Workdir + " (the working folder): the tenant's own folders, shared by its sessions and its file plane",
			"/proc: a new procfs showing only the tenant's processes", "/run: empty (a kernel finds its own connection folder at " + sandbox.KernelDir + ")",
			"/etc/passwd, /etc/group: the host's, with the tenant's account " + sandbox.UserName,
			"aiod's state directory: hidden"},
		Seccomp:  "deny list (EPERM): mounts and namespaces, ptrace and process_vm_*, keyrings, bpf, perf_event_open, userfaultfd, io_uring, kexec, modules, reboot, swap, clock and hostname changes; clone with namespace flags; clone3 answers ENOSYS; other architectures' system calls kill the process",
		Landlock: "not used: the mount namespace already makes everything but the tenant's folders read-only",
		Shared: []string{
			"the kernel (one Linux kernel, as with containers)",
			"CPU, memory, disk and I/O bandwidth beyond the per-runtime limits",
			"the host's read-only files: whatever the tenant's uid may read",
			"the cgroup tree under /sys/fs/cgroup is readable (other runtimes' process ids and memory use, not their data)",
			"kernel templates: every forked kernel starts from the same warm template process (root, not dumpable, invisible)",
		},
	}
	for _, v := range is.cfg.Volumes {
		how := "read-only"
		if v.ReadWrite {
			how = "read-write, shared by every tenant"
		}
		r.View = append(r.View, fmt.Sprintf("%s: the host's %s (--volume), %s, nosuid", v.Path, v.Host, how))
		r.Shared = append(r.Shared, fmt.Sprintf("the volume %s (%s)", v.Path, how))
	}
	return r
}

func egressList(rules []sandbox.EgressRule) string {
	if len(rules) == 0 {
		return "nothing"
	}
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = fmt.Sprintf("%s:%d", r.Host, r.Port)
	}
	return strings.Join(out, ", ")
}
