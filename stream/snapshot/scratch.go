package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// Scratch is a folder a session's runtime and aiod both reach: the runtime
// at View, aiod at Host. Files the runtime writes there are owned by UID
// (a tenant's /tmp, or a folder of --runtime-user's). A save has the
// runtime write its payload there and streams it into the sealed file; a
// restore streams the verified payload there for the runtime to read. So
// a snapshot's payload never sits whole in aiod's memory (as base64 on
// the runtime's stdout it cost aiod about three times its size).
type Scratch struct {
	View, Host string
	UID, GID   int
}

// scratchName is a fresh file name in a scratch folder: 128 random bits,
// so that user code in the runtime cannot have made it beforehand.
func scratchName(what string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return ".aiod-" + what + "-" + hex.EncodeToString(b)
}

// viewPath is name as the runtime sees it.
func (sc *Scratch) viewPath(name string) string { return path.Join(sc.View, name) }

// dir opens the scratch folder itself (never a link to another one).
func (sc *Scratch) dir() (int, error) {
	return unix.Open(sc.Host, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// open opens the payload the runtime wrote at name for reading, refusing
// what the runtime's code could have put there instead: a link (to a file
// of aiod's), a fifo or device, a file of another owner, or one over
// limit bytes. The file's size is returned.
func (sc *Scratch) open(name string, limit int64) (*os.File, int64, error) {
	d, err := sc.dir()
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(d)
	fd, err := unix.Openat(d, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("open the runtime's snapshot file: %w", err)
	}
	f := os.NewFile(uintptr(fd), sc.viewPath(name))
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.Mode().IsRegular():
		err = fmt.Errorf("the runtime's snapshot file %s is not a regular file (%s)", sc.viewPath(name), st.Mode().Type())
	case sys == nil || int(sys.Uid) != sc.UID:
		err = fmt.Errorf("the runtime's snapshot file %s is not the runtime user's", sc.viewPath(name))
	case st.Size() > limit:
		err = fmt.Errorf("the runtime's snapshot file is %d bytes, over the limit %d (--snapshot-max-bytes)", st.Size(), limit)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// create makes name, new, for the runtime user to read (0600, its own).
func (sc *Scratch) create(name string) (*os.File, error) {
	d, err := sc.dir()
	if err != nil {
		return nil, err
	}
	defer unix.Close(d)
	fd, err := unix.Openat(d, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("make the restore's file: %w", err)
	}
	if err := unix.Fchown(fd, sc.UID, sc.GID); err != nil {
		unix.Close(fd)
		_ = sc.remove(name)
		return nil, fmt.Errorf("give the restore's file to the runtime user: %w", err)
	}
	return os.NewFile(uintptr(fd), sc.viewPath(name)), nil
}

// remove removes name from the folder (a link put in its place goes, not
// what it points to). Gone already is no error.
func (sc *Scratch) remove(name string) error {
	d, err := sc.dir()
	if err != nil {
		return err
	}
	defer unix.Close(d)
	if err := unix.Unlinkat(d, name, 0); err != nil && err != unix.ENOENT {
		return err
	}
	return nil
}
