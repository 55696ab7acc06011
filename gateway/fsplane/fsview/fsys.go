// Package fsview is where the file plane's paths lead: the FS interface a
// caller's view of the file system implements, and HostFS, the host with
// aiod's own rights. The call core picks the view for a caller; the file
// plane (package fsplane) and the surfaces act through it.
package fsview

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// FS is where the plane's paths lead: the host (HostFS) or a caller's view
// of it (once tenants are isolated, a helper living in the tenant's
// namespaces as the tenant's uid, which opens files there and passes the
// descriptors back). Every file access of the plane goes through the FS
// picked for the request (Config.View, Files.For); reading and writing
// happen on the *os.File that OpenFile returns, which the plane closes.
//
// Names are absolute and clean. Errors are what package os returns
// (*fs.PathError around a syscall.Errno), which the plane maps to its
// statuses and error types. Methods may be called concurrently.
type FS interface {
	// OpenFile opens name as os.OpenFile does. flag is passed through
	// whole: the plane adds O_NONBLOCK to every open so that a FIFO cannot
	// block it, and O_DIRECTORY where it wants a folder.
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	// Stat describes name, following a final symbolic link.
	Stat(name string) (fs.FileInfo, error)
	// Lstat describes name itself, a symbolic link included.
	Lstat(name string) (fs.FileInfo, error)
	// ReadDir lists a folder sorted by name; each entry's Info is its
	// Lstat.
	ReadDir(name string) ([]fs.DirEntry, error)
	// MkdirAll creates name and its missing parents, as os.MkdirAll.
	MkdirAll(name string, perm fs.FileMode) error
	// Remove removes name itself (a file, a link, an empty folder).
	Remove(name string) error
	// RemoveAll removes name and, without following links, its contents;
	// a name that does not exist is no error.
	RemoveAll(name string) error
	// Readlink returns a symbolic link's target as written.
	Readlink(name string) (string, error)
}

// HostFS is the host's file system with aiod's own rights: package os,
// plus one rule. Below the working folder a path is resolved through
// os.Root opened on that folder, so neither a symbolic link nor a ".." in
// one leads out of it; such a path fails with permission denied naming the
// folder. Links that stay inside work, absolute ones too. Paths elsewhere,
// and the working folder itself, are used as given. Safe for concurrent
// use.
//
// HostFS is the only code of the plane that touches files by name
// (TestFilesOnlyThroughFS checks it).
type HostFS struct {
	ws string // clean absolute working folder; "" when no rule applies
}

var _ FS = (*HostFS)(nil)

// NewHostFS returns the host's file system whose working folder is
// workspace (the daemon's --workdir). Empty or "/" means no folder, so no
// link rule: nothing leaves "/".
func NewHostFS(workspace string) *HostFS {
	if workspace == "" {
		return &HostFS{}
	}
	ws, err := filepath.Abs(workspace)
	if err != nil {
		ws = filepath.Clean(workspace)
	}
	if ws == "/" {
		ws = ""
	}
	return &HostFS{ws: ws}
}

// below returns name relative to the working folder when it lies strictly
// below it.
func (h *HostFS) below(name string) (string, bool) {
	if h.ws == "" || !strings.HasPrefix(name, h.ws+"/") {
		return "", false
	}
	return name[len(h.ws)+1:], true
}

func (h *HostFS) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	rel, ok := h.below(name)
	if !ok {
		return os.OpenFile(name, flag, perm)
	}
	return inRoot(h, name, rel, true, func(r *os.Root, rel string) (*os.File, error) {
		return r.OpenFile(rel, flag, perm)
	})
}

func (h *HostFS) Stat(name string) (fs.FileInfo, error) {
	rel, ok := h.below(name)
	if !ok {
		return os.Stat(name)
	}
	return inRoot(h, name, rel, true, func(r *os.Root, rel string) (fs.FileInfo, error) { return r.Stat(rel) })
}

func (h *HostFS) Lstat(name string) (fs.FileInfo, error) {
	rel, ok := h.below(name)
	if !ok {
		return os.Lstat(name)
	}
	return inRoot(h, name, rel, false, func(r *os.Root, rel string) (fs.FileInfo, error) { return r.Lstat(rel) })
}

// ReadDir opens the folder with O_DIRECTORY, so a FIFO named as a folder
// fails at once instead of blocking. A folder opened in an os.Root reads
// each entry's Lstat relative to the folder's descriptor.
func (h *HostFS) ReadDir(name string) ([]fs.DirEntry, error) {
	f, err := h.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	des, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, err
	}
	slices.SortFunc(des, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return des, nil
}

func (h *HostFS) MkdirAll(name string, perm fs.FileMode) error {
	rel, ok := h.below(name)
	if !ok {
		return os.MkdirAll(name, perm)
	}
	// The working folder may not exist yet (a fresh --workdir); it is
	// created as before, then what lies below it through the root.
	if _, err := os.Stat(h.ws); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(h.ws, perm); err != nil {
			return err
		}
	}
	_, err := inRoot(h, name, rel, true, func(r *os.Root, rel string) (struct{}, error) {
		return struct{}{}, r.MkdirAll(rel, perm)
	})
	return err
}

func (h *HostFS) Remove(name string) error {
	rel, ok := h.below(name)
	if !ok {
		return os.Remove(name)
	}
	_, err := inRoot(h, name, rel, false, func(r *os.Root, rel string) (struct{}, error) {
		return struct{}{}, r.Remove(rel)
	})
	return err
}

func (h *HostFS) RemoveAll(name string) error {
	rel, ok := h.below(name)
	if !ok {
		return os.RemoveAll(name)
	}
	_, err := inRoot(h, name, rel, false, func(r *os.Root, rel string) (struct{}, error) {
		return struct{}{}, r.RemoveAll(rel)
	})
	return err
}

func (h *HostFS) Readlink(name string) (string, error) {
	rel, ok := h.below(name)
	if !ok {
		return os.Readlink(name)
	}
	return inRoot(h, name, rel, false, func(r *os.Root, rel string) (string, error) { return r.Readlink(rel) })
}

// inRoot runs op on rel in an os.Root opened on the working folder. The
// root is opened per call: the folder may be created, removed or replaced
// while aiod runs. follow says whether op follows a final symbolic link.
//
// os.Root refuses every absolute link, also one that stays inside the
// folder (runtimes make such links). On that refusal the path is resolved
// here; if its real location is inside, op runs once more on that
// link-free path, still through the root, so a link swapped in meanwhile
// cannot lead out either.
func inRoot[T any](h *HostFS, name, rel string, follow bool, op func(*os.Root, string) (T, error)) (T, error) {
	var zero T
	r, err := os.OpenRoot(h.ws)
	if err != nil {
		return zero, &fs.PathError{Op: "open", Path: name, Err: Underlying(err)}
	}
	defer r.Close()
	v, err := op(r, rel)
	if !isEscape(err) {
		return v, withPath(err, name)
	}
	if rel, err = h.realRel(name, follow); err != nil {
		return zero, err
	}
	v, err = op(r, rel)
	if isEscape(err) {
		return zero, h.escaped(name)
	}
	return v, withPath(err, name)
}

// realRel resolves name on the host (its last element only when follow)
// and returns it relative to the working folder's real location, or the
// escape error when it lies outside.
func (h *HostFS) realRel(name string, follow bool) (string, error) {
	var real string
	var err error
	if follow {
		real, err = RealPath(HostLinks{}, name)
	} else {
		real, err = RealPath(HostLinks{}, filepath.Dir(name))
		real = filepath.Join(real, filepath.Base(name))
	}
	if err != nil {
		return "", err
	}
	ws, err := RealPath(HostLinks{}, h.ws)
	if err != nil {
		return "", err
	}
	switch {
	case real == ws:
		return ".", nil
	case Within(ws, real):
		return strings.TrimPrefix(real[len(ws):], "/"), nil
	}
	return "", h.escaped(name)
}

// escaped is the permission error of a path that leaves the working folder.
func (h *HostFS) escaped(name string) error {
	return &fs.PathError{Op: "resolve", Path: name, Err: &EscapeError{Workspace: h.ws}}
}

// EscapeError is HostFS's refusal of a path that leaves the working folder
// through a symbolic link: permission denied (it unwraps to EACCES), with
// why.
type EscapeError struct{ Workspace string }

func (e *EscapeError) Error() string {
	return "leaves the working folder " + e.Workspace + " through a symbolic link; aiod does not follow links out of it"
}

func (e *EscapeError) Unwrap() error { return syscall.EACCES }

// rootEscapes is the text of os.Root's refusal of a path that leaves the
// root (the error is not exported); TestOSRootEscapeIsRecognised fails if
// a Go release changes it.
const rootEscapes = "path escapes from parent"

// isEscape reports an os.Root refusal, which may be wrapped in more than
// one *fs.PathError (MkdirAll wraps its Stat's).
func isEscape(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == rootEscapes {
			return true
		}
	}
	return false
}

// withPath names the whole path in an os.Root error, which names the part
// below the root.
func withPath(err error, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: name, Err: Underlying(err)}
	}
	return err
}

// Underlying is the innermost error of a chain of *fs.PathError.
func Underlying(err error) error {
	var pe *fs.PathError
	for errors.As(err, &pe) {
		err = pe.Err
	}
	return err
}

// HostLinks reads links on the host as they are, for HostFS's own
// resolution and Config.Root's.
type HostLinks struct{}

func (HostLinks) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }
func (HostLinks) Readlink(name string) (string, error)   { return os.Readlink(name) }

// maxLinkHops bounds symlink chasing, as the kernel's own limit does.
const maxLinkHops = 40

// LinkReader is what RealPath reads: the calls that do not follow a final
// link. Every FS is one.
type LinkReader interface {
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
}

// RealPath resolves every symlink in p (absolute and clean), one element
// at a time. Parts that do not exist are kept as written under their
// resolved parent; a dangling symlink is followed to its target, since a
// write through it would land there.
func RealPath(fsys LinkReader, p string) (string, error) {
	resolved, rest := "/", strings.TrimPrefix(p, "/")
	for hops := 0; rest != ""; {
		var elem string
		elem, rest, _ = strings.Cut(rest, "/")
		switch elem {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, elem)
		fi, err := fsys.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			return filepath.Join(next, rest), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", &fs.PathError{Op: "resolve", Path: p, Err: syscall.ELOOP}
		}
		target, err := fsys.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = strings.TrimPrefix(target, "/") + "/" + rest
	}
	return resolved, nil
}

// Within reports whether p is root or lies below it. Both must be clean.
func Within(root, p string) bool {
	if root == string(filepath.Separator) {
		return true
	}
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}
