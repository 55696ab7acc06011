// Package sandbox confines a tenant's runtimes at fork speed: each runtime
// process, before it runs anything of the runtime, enters namespaces of its
// own (mount, IPC, UTS) and its tenant's network namespace, sees the host's
// file system read-only with the tenant's folders mounted over /tmp,
// /var/tmp, /dev/shm, HOME and the working folder, sees only its tenant's
// processes in /proc, runs as the tenant's uid with no capabilities and
// no_new_privs, under a seccomp filter.
//
// The work is described once, in Go, as a Plan: a list of mount steps and
// the credentials and filter to end with. Two small appliers carry it out in
// the runtime's own process: confine.py in a kernel template's forked child
// (a forked kernel never execs), and Apply in aiod's own binary re-executed
// as "aiod-sandbox" in front of every spawned runtime (a kernel, a REPL, a
// one-shot node) and of the tenant's file helper (files.go).
package sandbox

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// Step is one mount step of a Plan, done as root in the runtime's new mount
// namespace, in order.
type Step struct {
	// Op is one of:
	//   private:  make every mount under Path private (MS_REC|MS_PRIVATE)
	//   readonly: make the mount at Path (with Recursive, every mount under
	//             it) read-only and nosuid (mount_setattr)
	//   proc:     mount a new procfs at Path with options Data
	//   tmpfs:    mount a new tmpfs at Path with options Data
	//   mkdir:    make the folder Path and its missing parents (mode 0755)
	//   move:     mount clone number Clone (taken before any step ran) at
	//             Path, read-only when ReadOnly, always nosuid and nodev
	Op        string `json:"op"`
	Path      string `json:"path"`
	Data      string `json:"data,omitempty"`
	Clone     int    `json:"clone,omitempty"`
	ReadOnly  bool   `json:"ro,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
}

// Plan is everything one process does to enter its sandbox. The JSON form
// is what confine.py reads.
type Plan struct {
	// Unshare names the namespaces the process makes for itself: "mnt",
	// "ipc", "uts", "net". (The re-executed binary gets them at clone.)
	Unshare []string `json:"unshare"`
	// NetFD is the index, in the descriptors passed with the plan, of the
	// network namespace to join; -1 joins none.
	NetFD int `json:"net_fd"`
	// LoUp brings the loopback interface up (in a network namespace made
	// by the process itself).
	LoUp bool `json:"lo_up,omitempty"`
	// Clones are paths cloned (open_tree) before the first step, so that
	// steps may cover where they are and still mount them.
	Clones []string `json:"clones"`
	Steps  []Step   `json:"steps"`
	// UID and GID are the credentials to end with (no supplementary
	// groups, no capabilities); Keep leaves the process root (a template
	// preparing its own namespace).
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Keep bool   `json:"keep_root,omitempty"`
	// Seccomp is the filter to install last, as raw BPF (8 bytes per
	// instruction, host byte order); empty installs none.
	Seccomp []byte `json:"seccomp,omitempty"`
}

// JSON is p in the form confine.py reads.
func (p *Plan) JSON() []byte {
	b, _ := json.Marshal(p) // a Plan always marshals
	return b
}

// View describes what a tenant's runtime sees; the Plan of each runtime is
// built from it.
type View struct {
	// Home, Tmp, VarTmp, Shm and Work are the tenant's folders on the host,
	// mounted in the view at HomePath, /tmp, /var/tmp, /dev/shm and
	// WorkPath.
	Home, Tmp, VarTmp, Shm, Work string
	// HomePath is where the view shows Home (HOME); WorkPath the working
	// folder (--workdir).
	HomePath, WorkPath string
	// Ptys, when not 0, gives each runtime a devpts instance of its own
	// holding at most that many pseudo-terminals, at /dev/pts and
	// /dev/ptmx: a tenant's openpty then takes nothing of the host's
	// (whose share, kernel.pty.reserve, stays root's). 0 keeps the host's
	// (a terminal aiod opens for the tenant is on it).
	Ptys int
	// Passwd and Group are files shown read-only over /etc/passwd and
	// /etc/group, naming the tenant's uid; "" leaves the host's.
	Passwd, Group string
	// Hide are host folders hidden behind an empty read-only tmpfs (aiod's
	// state directory), when the view would show them.
	Hide []string
	// UID and GID are the tenant's.
	UID, GID uint32
	// Net is the index of the tenant's network namespace among the
	// descriptors passed with the plan; -1 keeps the host's network.
	Net int
	// Seccomp is the filter (Filter()).
	Seccomp []byte
	// Volumes are host folders shown at their paths (CheckVolumes).
	Volumes []Volume
}

// KernelDir is where a kernel sees its own connection folder (its
// connection file and ipc sockets); nothing else of aiod's is in /run.
const KernelDir = "/run/aiod/kernel"

// HomeBase is the folder the view's HOME is made in.
const HomeBase = "/home"

// TemplatePlan is what a kernel template does to itself before it imports
// anything: a mount namespace of its own whose /home is a private tmpfs
// holding an empty HomePath. The template (root) then reads IPython's
// configuration with the HOME its kernels will have, without touching the
// host, and its children's own namespaces start as copies of this one.
func TemplatePlan(homePath string) *Plan {
	return &Plan{Unshare: []string{"mnt"}, NetFD: -1, Keep: true, Steps: []Step{
		{Op: "private", Path: "/"},
		{Op: "tmpfs", Path: HomeBase, Data: "mode=0755,size=1m"},
		{Op: "mkdir", Path: homePath},
	}}
}

// RuntimePlan is the plan of one runtime of the view. fromTemplate says that
// the process is a template's child, whose mount namespace already has the
// template's /home; kernelDir, when not "", is the kernel's connection
// folder on the host, shown at KernelDir.
func (v *View) RuntimePlan(fromTemplate bool, kernelDir string) *Plan {
	p := &Plan{Unshare: []string{"mnt", "ipc", "uts"}, NetFD: v.Net, UID: v.UID, GID: v.GID, Seccomp: v.Seccomp}
	b := &planBuilder{p: p}
	b.step(Step{Op: "private", Path: "/"})
	if !fromTemplate {
		b.step(Step{Op: "tmpfs", Path: HomeBase, Data: "mode=0755,size=1m"})
		b.step(Step{Op: "mkdir", Path: v.HomePath})
	}
	// Folders made in the template's /home tmpfs must be made before the
	// whole tree turns read-only.
	if under(v.WorkPath, HomeBase) && v.WorkPath != v.HomePath {
		b.step(Step{Op: "mkdir", Path: v.WorkPath})
	}
	for _, vol := range v.Volumes {
		if under(vol.Path, HomeBase) {
			b.step(Step{Op: "mkdir", Path: vol.Path})
		}
	}
	b.step(Step{Op: "readonly", Path: "/", Recursive: true})
	b.step(Step{Op: "proc", Path: "/proc", Data: "hidepid=invisible"})
	if v.Ptys > 0 {
		b.step(Step{Op: "devpts", Path: "/dev/pts", Data: fmt.Sprintf("newinstance,ptmxmode=0666,mode=0620,max=%d", v.Ptys)})
	}
	b.step(Step{Op: "tmpfs", Path: "/run", Data: "mode=0755,size=64k,nr_inodes=64"})
	if kernelDir != "" {
		b.step(Step{Op: "mkdir", Path: KernelDir})
	}
	if under(v.WorkPath, "/run") {
		b.step(Step{Op: "mkdir", Path: v.WorkPath})
	}
	for _, h := range v.Hide {
		if !v.hidden(h) {
			b.step(Step{Op: "tmpfs", Path: h, Data: "mode=0755,size=4k,nr_inodes=8"})
			b.step(Step{Op: "readonly", Path: h})
		}
	}
	b.move(v.Tmp, "/tmp", false)
	b.move(v.VarTmp, "/var/tmp", false)
	b.move(v.Shm, "/dev/shm", false)
	b.move(v.Home, v.HomePath, false)
	b.move(v.Work, v.WorkPath, false)
	b.move(v.Passwd, "/etc/passwd", true)
	b.move(v.Group, "/etc/group", true)
	b.move(kernelDir, KernelDir, false)
	for _, vol := range v.Volumes {
		b.move(vol.Host, vol.Path, !vol.ReadWrite)
	}
	b.step(Step{Op: "readonly", Path: "/run"})
	b.step(Step{Op: "readonly", Path: HomeBase})
	return p
}

// FilesPlan is the plan of the tenant's file helper: the runtimes' view,
// without a network or a kernel folder.
func (v *View) FilesPlan() *Plan {
	w := *v
	w.Net = -1
	p := w.RuntimePlan(false, "")
	p.Unshare = append(p.Unshare, "net")
	return p
}

// hidden reports whether the view already covers h (it lies under one of
// the folders the view replaces).
func (v *View) hidden(h string) bool {
	for _, c := range []string{"/tmp", "/var/tmp", "/dev/shm", "/run", "/proc", HomeBase} {
		if under(h, c) {
			return true
		}
	}
	return false
}

type planBuilder struct{ p *Plan }

func (b *planBuilder) step(s Step) { b.p.Steps = append(b.p.Steps, s) }

// move clones src and mounts it at dst; nothing when src is "".
func (b *planBuilder) move(src, dst string, ro bool) {
	if src == "" {
		return
	}
	b.p.Clones = append(b.p.Clones, src)
	b.step(Step{Op: "move", Path: dst, Clone: len(b.p.Clones) - 1, ReadOnly: ro})
}

// under reports whether p is dir or lies below it; both clean and absolute.
func under(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// CheckWorkdir says why dir cannot be the working folder of a tenant view:
// it must be absolute, and not one of the folders the view replaces nor
// inside aiod's state directory.
func CheckWorkdir(dir, state string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("%q is not a clean absolute path", dir)
	}
	if dir == HomePath {
		return nil // the tenant works in its HOME
	}
	for _, c := range []string{"/", "/tmp", "/var/tmp", "/dev/shm", "/run", "/proc", "/sys", "/dev", HomeBase, "/etc"} {
		if dir == c {
			return fmt.Errorf("%s is a folder the tenant view replaces or must keep: choose a folder below it", dir)
		}
	}
	for _, c := range []string{"/proc", "/sys", "/dev"} {
		if under(dir, c) && !under(dir, "/dev/shm") {
			return fmt.Errorf("%s is inside %s", dir, c)
		}
	}
	if state != "" && (under(dir, state) || under(state, dir)) {
		return fmt.Errorf("%s and the state directory %s must not contain each other", dir, state)
	}
	return nil
}
