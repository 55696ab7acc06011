package sandbox

import (
	"encoding/binary"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Denied lists the system calls a tenant's runtime is refused (EPERM),
// grouped by why no notebook needs them. docs/isolation.md lists the same groups.
var Denied = []struct {
	Why   string
	Calls []string
}{
	{"mounts and namespaces: the view is made once, before user code", []string{
		"mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "mount_setattr", "move_mount",
		"open_tree", "fsopen", "fsconfig", "fsmount", "fspick"}},
	{"tracing and reading other processes", []string{
		"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"}},
	{"kernel keyrings", []string{"keyctl", "add_key", "request_key"}},
	{"kernel attack surface without a notebook use", []string{
		"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
		"open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "uselib", "ustat", "sysfs", "vhangup"}},
	{"the machine's own state", []string{
		"kexec_load", "kexec_file_load", "reboot", "init_module", "finit_module", "delete_module",
		"swapon", "swapoff", "acct", "syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
		"iopl", "ioperm", "quotactl", "quotactl_fd", "nfsservctl", "setdomainname", "sethostname"}},
}

// cloneNamespaces are the clone(2) flags that make namespaces: clone with
// any of them is refused like unshare. clone3 passes its flags in memory,
// where a filter cannot look, so it answers ENOSYS and libc falls back to
// clone.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// Filter builds the seccomp filter of a tenant's runtimes as raw BPF (what
// Plan.Seccomp holds), for this machine's architecture. The program is
// assembled by github.com/elastic/go-seccomp-bpf; a system call of another
// architecture's ABI (x86's int 0x80 on x86_64) is refused outright, since a
// deny list cannot speak for another table.
func Filter() ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	deny := seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	var names []string
	for _, g := range Denied {
		names = append(names, g.Calls...)
	}
	pol := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: []seccomp.SyscallGroup{
		{Names: names, Action: deny},
		{Names: []string{"clone3"}, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)},
		{NamesWithCondtions: []seccomp.NameWithConditions{{Name: "clone", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaces}}}}, Action: deny},
	}}
	insts, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	// seccomp_data.arch is at offset 4: anything but this architecture is
	// refused before the library's program (which would allow it).
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
	}
	raw, err := bpf.Assemble(append(guard, insts...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}
