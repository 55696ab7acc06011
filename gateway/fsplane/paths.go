package fsplane

import (
	"path/filepath"
	"strings"
	"syscall"

	"github.com/aiod/aiod/gateway/fsplane/fsview"
)

// resolveRoot makes Config.Root absolute and resolves its symlinks once, on
// the host, so later prefix checks compare real paths with a real root.
func resolveRoot(root string) string {
	abs, err := filepath.Abs(root)
	if err != nil {
		abs = filepath.Clean(root)
	}
	if r, err := fsview.RealPath(fsview.HostLinks{}, abs); err == nil {
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
	real, err := fsview.RealPath(fsys, c)
	if err != nil {
		return "", err
	}
	if !fsview.Within(s.root, real) {
		return "", &fsErr{kind: kindPermission, errno: syscall.EACCES, exc: "PermissionError",
			msg: "path is outside the allowed root " + s.root}
	}
	return c, nil
}

// quote renders a user-given value inside a message.
func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return "'" + s + "'"
}
