package fsplane

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinkHops bounds symlink chasing, as the kernel's own limit does.
const maxLinkHops = 40

// resolveRoot makes Config.Root absolute and resolves its symlinks once, on
// the host, so later prefix checks compare real paths with a real root.
func resolveRoot(root string) string {
	abs, err := filepath.Abs(root)
	if err != nil {
		abs = filepath.Clean(root)
	}
	if r, err := realPath(hostLinks{}, abs); err == nil {
		return r
	}
	return abs
}

// resolve checks a request path and returns it cleaned. The path must be
// absolute. With a root, the path's real location in fsys (symlinks
// resolved, also for the parts that do not exist yet) must lie inside it.
//
// The check and the later open are two steps: a symlink swapped in between
// can escape the root. Root is a guard rail against mistakes, not a jail.
func (s *server) resolve(fsys FS, p string) (string, error) {
	if p == "" {
		return "", &fsErr{kind: kindInvalidPath, errno: syscall.EINVAL, exc: "ValueError", msg: "path is empty"}
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", &fsErr{kind: kindInvalidPath, errno: syscall.EINVAL, exc: "ValueError", msg: "path contains a NUL byte"}
	}
	if !filepath.IsAbs(p) {
		return "", &fsErr{kind: kindInvalidPath, errno: syscall.EINVAL, exc: "ValueError",
			msg: "path must be absolute, got " + quote(p)}
	}
	c := filepath.Clean(p)
	if s.root == "" {
		return c, nil
	}
	real, err := realPath(fsys, c)
	if err != nil {
		return "", err
	}
	if !within(s.root, real) {
		return "", &fsErr{kind: kindPermission, errno: syscall.EACCES, exc: "PermissionError",
			msg: "path is outside the allowed root " + s.root}
	}
	return c, nil
}

// linkReader is what realPath reads: the calls that do not follow a final
// link. Every FS is one.
type linkReader interface {
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
}

// realPath resolves every symlink in p (absolute and clean), one element
// at a time. Parts that do not exist are kept as written under their
// resolved parent; a dangling symlink is followed to its target, since a
// write through it would land there.
func realPath(fsys linkReader, p string) (string, error) {
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

// within reports whether p is root or lies below it. Both must be clean.
func within(root, p string) bool {
	if root == string(filepath.Separator) {
		return true
	}
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// quote renders a user-given value inside a message.
func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return "'" + s + "'"
}
