package fsplane

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinkHops bounds symlink chasing, as the kernel's own limit does.
const maxLinkHops = 40

// resolveRoot makes Config.Root absolute and resolves its symlinks once, so
// later prefix checks compare real paths with a real root.
func resolveRoot(root string) string {
	abs, err := filepath.Abs(root)
	if err != nil {
		abs = filepath.Clean(root)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	return abs
}

// resolve checks a request path and returns it cleaned. The path must be
// absolute. With a root, the path's real location (symlinks resolved, also
// for the parts that do not exist yet) must lie inside it.
//
// The check and the later open are two steps: a symlink swapped in between
// can escape the root. Root is a guard rail against mistakes, not a jail.
func (s *server) resolve(p string) (string, error) {
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
	real, err := realPath(c, 0)
	if err != nil {
		return "", err
	}
	if !within(s.root, real) {
		return "", &fsErr{kind: kindPermission, errno: syscall.EACCES, exc: "PermissionError",
			msg: "path is outside the allowed root " + s.root}
	}
	return c, nil
}

// realPath resolves every symlink in p. Parts that do not exist are kept as
// written under their resolved parent; a dangling symlink is followed to its
// target, since a write through it would land there.
func realPath(p string, hops int) (string, error) {
	if hops > maxLinkHops {
		return "", &fs.PathError{Op: "resolve", Path: p, Err: syscall.ELOOP}
	}
	r, err := filepath.EvalSymlinks(p)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if fi, lerr := os.Lstat(p); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		return realPath(target, hops+1)
	}
	dir := filepath.Dir(p)
	if dir == p {
		return p, nil
	}
	rd, err := realPath(dir, hops)
	if err != nil {
		return "", err
	}
	return filepath.Join(rd, filepath.Base(p)), nil
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
