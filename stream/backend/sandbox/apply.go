package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reexecName is argv[0] of aiod's own binary re-executed in front of a
// sandboxed process; init below takes over such a process before main.
const reexecName = "aiod-sandbox"

// Modes of the re-executed binary.
const (
	modeExec  = "exec"  // apply the plan, then exec the runtime
	modeFiles = "files" // apply the plan, then serve the tenant's files on fd 3
	modeProbe = "probe" // apply the plan, then exit 0
)

func init() {
	if len(os.Args) < 1 || os.Args[0] != reexecName {
		return
	}
	// Everything per thread (the network namespace joined, no_new_privs,
	// the filter, the exec) happens on the main thread.
	runtime.LockOSThread()
	err := reexec(os.Args[1:])
	fmt.Fprintf(os.Stderr, "aiod sandbox: %v\n", err)
	os.Exit(126)
}

// reexec is the re-executed binary: argv is MODE FIRST_FD DIR PLAN [PATH
// ARGV...], where FIRST_FD is the first of the descriptors the plan refers
// to, DIR the working folder to enter once the view is made and PLAN the
// plan's JSON or "@N", descriptor N that holds it (planFile).
func reexec(argv []string) error {
	if len(argv) < 4 {
		return errors.New("usage: aiod-sandbox MODE FIRST_FD DIR PLAN [PATH ARGV...]")
	}
	mode, dir := argv[0], argv[2]
	first, err := strconv.Atoi(argv[1])
	if err != nil {
		return fmt.Errorf("first descriptor %q: %w", argv[1], err)
	}
	raw, err := planArg(argv[3])
	if err != nil {
		return err
	}
	var p Plan
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("read the plan: %w", err)
	}
	switch mode {
	case modeExec:
		if len(argv) < 6 {
			return errors.New("exec: no program")
		}
		if err := Apply(&p, indexFDs(p, first), dir, false); err != nil {
			return err
		}
		closeFrom(first) // the namespace descriptor must not reach the runtime
		return unix.Exec(argv[4], argv[5:], os.Environ())
	case modeFiles:
		if err := Apply(&p, indexFDs(p, first), dir, true); err != nil {
			return err
		}
		return serveFiles(os.NewFile(3, "files-socket"))
	case modeProbe:
		if err := Apply(&p, indexFDs(p, first), dir, false); err != nil {
			return err
		}
		os.Exit(0)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// planArg is the plan's JSON from its argument: the JSON itself, or "@N"
// for descriptor N, which holds it and is closed once read.
func planArg(arg string) ([]byte, error) {
	n, ok := strings.CutPrefix(arg, "@")
	if !ok {
		return []byte(arg), nil
	}
	fd, err := strconv.Atoi(n)
	if err != nil {
		return nil, fmt.Errorf("plan descriptor %q: %w", arg, err)
	}
	f := os.NewFile(uintptr(fd), "plan")
	defer f.Close()
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read the plan from descriptor %d: %w", fd, err)
	}
	return raw, nil
}

// planFile is a memory file holding p's JSON, read from its start: a
// long-lived helper gets its plan there instead of on its command line,
// where ps and the tenant itself would read it for the helper's whole
// life. The caller closes it once the helper has started.
func planFile(p *Plan) (*os.File, error) {
	fd, err := unix.MemfdCreate("aiod-plan", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("make the plan's file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "plan")
	if _, err := f.Write(p.JSON()); err != nil {
		f.Close()
		return nil, fmt.Errorf("write the plan's file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("rewind the plan's file: %w", err)
	}
	return f, nil
}

// indexFDs maps the plan's descriptor indexes to descriptor numbers.
func indexFDs(p Plan, first int) []int {
	if p.NetFD < 0 {
		return nil
	}
	fds := make([]int, p.NetFD+1)
	for i := range fds {
		fds[i] = first + i
	}
	return fds
}

// closeFrom marks every descriptor from fd on close-on-exec.
func closeFrom(fd int) {
	_ = unix.CloseRange(uint(fd), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}

// Apply carries out p in this process, which must be in the namespaces p
// unshares (the re-executed binary got them when aiod cloned it): mounts,
// then credentials, then no_new_privs and the filter, then dir becomes the
// working folder. fds are the descriptors p refers to. With allThreads the
// filter covers every thread of the process (a Go program that goes on
// running); otherwise only the calling thread, which must be the one that
// execs.
func Apply(p *Plan, fds []int, dir string, allThreads bool) error {
	if p.NetFD >= 0 {
		if p.NetFD >= len(fds) {
			return fmt.Errorf("network namespace descriptor %d was not passed", p.NetFD)
		}
		if err := unix.Setns(fds[p.NetFD], unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("join the tenant's network namespace: %w", err)
		}
	}
	if p.LoUp {
		if err := loUp(); err != nil {
			return err
		}
	}
	clones := make([]int, 0, len(p.Clones))
	defer func() {
		for _, fd := range clones {
			unix.Close(fd)
		}
	}()
	for _, c := range p.Clones {
		fd, err := unix.OpenTree(unix.AT_FDCWD, c, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("clone %s: %w", c, err)
		}
		clones = append(clones, fd)
	}
	for _, s := range p.Steps {
		if err := step(s, clones); err != nil {
			return fmt.Errorf("%s %s: %w", s.Op, s.Path, err)
		}
	}
	if dir != "" {
		if err := os.Chdir(dir); err != nil {
			return err
		}
	}
	if p.Keep {
		return nil
	}
	if err := dropTo(p.UID, p.GID); err != nil {
		return err
	}
	return installFilter(p.Seccomp, allThreads)
}

func step(s Step, clones []int) error {
	switch s.Op {
	case "private":
		return unix.Mount("", s.Path, "", unix.MS_REC|unix.MS_PRIVATE, "")
	case "readonly":
		flags := uint(0)
		if s.Recursive {
			flags = unix.AT_RECURSIVE
		}
		return unix.MountSetattr(unix.AT_FDCWD, s.Path, flags, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID})
	case "proc":
		return unix.Mount("proc", s.Path, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, s.Data)
	case "tmpfs":
		return unix.Mount("tmpfs", s.Path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, s.Data)
	case "devpts":
		// A devpts of the runtime's own, and /dev/ptmx its multiplexer.
		if err := unix.Mount("devpts", s.Path, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, s.Data); err != nil {
			return err
		}
		return unix.Mount(s.Path+"/ptmx", "/dev/ptmx", "", unix.MS_BIND, "")
	case "mkdir":
		return os.MkdirAll(s.Path, 0o755)
	case "move":
		if s.Clone < 0 || s.Clone >= len(clones) {
			return fmt.Errorf("no clone %d", s.Clone)
		}
		fd := clones[s.Clone]
		attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
		if s.ReadOnly {
			attr |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: attr}); err != nil {
			return err
		}
		return unix.MoveMount(fd, "", unix.AT_FDCWD, s.Path, unix.MOVE_MOUNT_F_EMPTY_PATH)
	}
	return fmt.Errorf("unknown step")
}

// loUp brings the loopback interface of this network namespace up.
func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// dropTo becomes uid:gid in every thread, with no supplementary group and
// so no capability. The kernel clears the parent-death signal and the
// dumpable flag on a change of credentials: both are set again (dumpable,
// so that the tenant's own processes see each other in /proc).
func dropTo(uid, gid uint32) error {
	var sig int32
	_ = unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0)
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("drop supplementary groups: %w", err)
	}
	if err := syscall.Setresgid(int(gid), int(gid), int(gid)); err != nil {
		return fmt.Errorf("set gid %d: %w", gid, err)
	}
	if err := syscall.Setresuid(int(uid), int(uid), int(uid)); err != nil {
		return fmt.Errorf("set uid %d: %w", uid, err)
	}
	if sig != 0 {
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0); err != nil {
			return fmt.Errorf("set the parent-death signal again: %w", err)
		}
		if os.Getppid() == 1 {
			return errors.New("aiod went away")
		}
	}
	return unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
}

// installFilter sets no_new_privs and installs the raw BPF program prog:
// on this thread, or with allThreads on every thread (TSYNC).
func installFilter(prog []byte, allThreads bool) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if len(prog) == 0 {
		return nil
	}
	if len(prog)%8 != 0 {
		return fmt.Errorf("seccomp program of %d bytes is not whole instructions", len(prog))
	}
	fprog := unix.SockFprog{Len: uint16(len(prog) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	flags := uintptr(0)
	if allThreads {
		flags = unix.SECCOMP_FILTER_FLAG_TSYNC
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("install the seccomp filter: %w", errno)
	}
	runtime.KeepAlive(prog)
	return nil
}

// Wrap makes cmd start in plan p: aiod's own binary, re-executed as
// "aiod-sandbox" in the namespaces p unshares, applies p and then execs
// cmd's program in cmd's folder. files are the descriptors p refers to (the
// tenant's network namespace); they are passed after cmd's ExtraFiles and
// never reach the program. cmd keeps its environment, descriptors and
// process attributes; its Credential is dropped (p's uid replaces it).
//
// The plan is on the re-executed binary's command line until it execs the
// program, whose own command line replaces it.
func Wrap(cmd *exec.Cmd, p *Plan, files []*os.File) {
	wrapAs(cmd, modeExec, p, files, nil)
}

// wrapAs makes cmd the re-executed binary in mode. With pf (planFile's),
// the plan is read from that descriptor, passed after files, instead of
// from the command line.
func wrapAs(cmd *exec.Cmd, mode string, p *Plan, files []*os.File, pf *os.File) {
	first := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, files...)
	plan := string(p.JSON())
	if pf != nil {
		plan = "@" + strconv.Itoa(3+len(cmd.ExtraFiles))
		cmd.ExtraFiles = append(cmd.ExtraFiles, pf)
	}
	args := []string{reexecName, mode, strconv.Itoa(first), cmd.Dir, plan}
	if mode == modeExec {
		args = append(args, cmd.Path)
		args = append(args, cmd.Args...)
	}
	cmd.Path, cmd.Args, cmd.Dir = "/proc/self/exe", args, "/"
	attr := &syscall.SysProcAttr{}
	if cmd.SysProcAttr != nil {
		*attr = *cmd.SysProcAttr
	}
	attr.Credential = nil
	attr.Cloneflags |= cloneFlags(p.Unshare)
	cmd.SysProcAttr = attr
}

func cloneFlags(names []string) uintptr {
	var f uintptr
	for _, n := range names {
		switch n {
		case "mnt":
			f |= unix.CLONE_NEWNS
		case "ipc":
			f |= unix.CLONE_NEWIPC
		case "uts":
			f |= unix.CLONE_NEWUTS
		case "net":
			f |= unix.CLONE_NEWNET
		}
	}
	return f
}
