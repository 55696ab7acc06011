package fsplane

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/aiod/aiod/gateway/fsplane/fsview"
)

// The plane reads and writes regular files only. A FIFO, a socket or a
// device is refused before it is read or written, with invalid_target
// (422) naming what it is: reading /dev/zero never ends, a FIFO blocks,
// and writing a device as root is never what a file route is for. Every
// open adds O_NONBLOCK, so a FIFO swapped in after the check cannot block
// the open either.
//
// The kernel's pseudo-files (/proc, /sys, ...) are regular files as far
// as stat goes, with a size of 0 (or a made-up one). They are read:
// /proc/self/status is useful text. A read error from one (/proc/self/mem
// answers EIO) is invalid_target naming the file system, not a 500; at most
// maxRead bytes are read from one, and a download of one is read into
// memory first, since its stated size is not its length.

// pseudoFileSystems names the statfs magic numbers of the kernel's
// pseudo-file systems.
var pseudoFileSystems = map[int64]string{
	0x9fa0:     "proc",
	0x62656572: "sysfs",
	0x64626720: "debugfs",
	0x74726163: "tracefs",
	0x73636673: "securityfs",
	0x27e0eb:   "cgroup",
	0x63677270: "cgroup2",
	0x62656570: "configfs",
	0xde5e81e4: "efivarfs",
	0x6165676c: "pstore",
	0xcafe4a11: "bpf",
}

// errSpecial refuses a target that is neither a regular file nor a folder.
func errSpecial(m fs.FileMode) error {
	what := "not a regular file (mode " + m.String() + ")"
	switch {
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		what = "a Unix socket"
	case m&fs.ModeCharDevice != 0:
		what = "a character device"
	case m&fs.ModeDevice != 0:
		what = "a block device"
	case m&fs.ModeSymlink != 0:
		what = "a symbolic link"
	}
	return &fsErr{kind: kindTarget, exc: "OSError",
		msg: "is " + what + ", not a regular file; the file plane reads and writes regular files only"}
}

// checkRegular passes a regular file and refuses anything else: a folder
// is "is a directory", the rest errSpecial.
func checkRegular(fi fs.FileInfo) error {
	switch m := fi.Mode(); {
	case m.IsRegular():
		return nil
	case m.IsDir():
		return errIsDir()
	default:
		return errSpecial(m)
	}
}

// source is a regular file opened for reading. Read through it, not
// through f: it bounds and explains a pseudo-file's reads.
type source struct {
	f      *os.File
	info   fs.FileInfo // from the open descriptor
	pseudo string      // the kernel pseudo-file system it is on ("proc"), "" for none
	n      int64       // bytes read from a pseudo-file
}

// openFile opens path in fsys for reading. A folder is "is a directory";
// anything else that is not a regular file is refused before it is
// opened, and again, from the descriptor, after.
func openFile(fsys FS, path string) (*source, error) {
	fi, err := fsys.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := checkRegular(fi); err != nil {
		return nil, err
	}
	f, err := fsys.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err = f.Stat(); err == nil {
		err = checkRegular(fi)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &source{f: f, info: fi, pseudo: pseudoFS(f)}, nil
}

func (s *source) Read(p []byte) (int, error) {
	if s.pseudo == "" {
		return s.f.Read(p)
	}
	if s.n > maxRead {
		return 0, errTooLarge(maxRead)
	}
	n, err := s.f.Read(p)
	s.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, fs.ErrPermission) {
		var en syscall.Errno
		errors.As(err, &en)
		err = &fsErr{kind: kindTarget, errno: en, exc: "OSError",
			msg: "is a kernel pseudo-file (" + s.pseudo + ") that cannot be read as a file: " + fsview.Underlying(err).Error()}
	}
	return n, err
}

func (s *source) Close() error { return s.f.Close() }

// pseudoFS names the kernel pseudo-file system f is on, "" for any other.
func pseudoFS(f *os.File) string {
	rc, err := f.SyscallConn()
	if err != nil {
		return ""
	}
	var st syscall.Statfs_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fstatfs(int(fd), &st) }); err != nil || serr != nil {
		return ""
	}
	return pseudoFileSystems[int64(st.Type)]
}

// openWrite opens path in fsys for writing with flags (O_WRONLY and
// O_CREATE plus O_TRUNC, O_APPEND or O_EXCL) and refuses a target that is
// not a regular file. Callers check the kind with Stat first, before the
// open could truncate anything; this is the check on the descriptor.
func openWrite(fsys FS, path string, flags int) (*os.File, error) {
	f, err := fsys.OpenFile(path, flags|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = checkRegular(fi)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// writeAll replaces path's content with data, as os.WriteFile does.
func writeAll(fsys FS, path string, data []byte) error {
	f, err := openWrite(fsys, path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// checkWritable refuses an existing target that a write must not open: a
// folder or a special file. A missing one is fine (nil, created false).
func checkWritable(fsys FS, path string) (exists bool, err error) {
	fi, err := fsys.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, checkRegular(fi)
}
