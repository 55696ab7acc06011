package fsplane

import (
	"io/fs"
	"path/filepath"
	"strings"
	"time"
)

// entry is one folder entry. info is the symlink target's when the link
// resolves (so size and kind describe what a reader gets), else the link's.
type entry struct {
	name, path string
	info       fs.FileInfo
	lmode      fs.FileMode // the entry's own mode (symlink bit kept)
	isDir      bool
}

// statEntry stats dir/name in fsys; ok is false when it vanished meanwhile.
func statEntry(fsys FS, dir, name string) (entry, bool) {
	p := filepath.Join(dir, name)
	li, err := fsys.Lstat(p)
	if err != nil {
		return entry{}, false
	}
	e := entry{name: name, path: p, info: li, lmode: li.Mode()}
	if li.Mode()&fs.ModeSymlink != 0 {
		if ti, err := fsys.Stat(p); err == nil {
			e.info = ti
		}
	}
	e.isDir = e.info.IsDir()
	return e, true
}

func (e entry) isLink() bool { return e.lmode&fs.ModeSymlink != 0 }

// readDirEntries lists dir's entries in fsys sorted by name. A path that is
// not a folder is invalid_target (ENOTDIR).
func readDirEntries(fsys FS, dir string) ([]entry, error) {
	fi, err := fsys.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, errNotDir()
	}
	des, err := fsys.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	out := make([]entry, 0, len(des))
	for _, d := range des {
		if e, ok := statEntry(fsys, dir, d.Name()); ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// rfc3339 is the timestamp format of every route: UTC, RFC 3339, with
// sub-second digits when the file system has them.
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// pyExt is the extension the way Python's os.path.splitext gives it: with
// the dot, "" for none, and "" for a dot file such as ".bashrc".
func pyExt(name string) string {
	trimmed := strings.TrimLeft(name, ".")
	return filepath.Ext(trimmed)
}

// permString renders a mode like ls: "-rw-r--r--", "drwxr-xr-x", "lrwxrwxrwx".
func permString(m fs.FileMode) string {
	kind := "-"
	switch {
	case m&fs.ModeSymlink != 0:
		kind = "l"
	case m.IsDir():
		kind = "d"
	}
	return kind + m.Perm().String()[1:]
}

func isHidden(name string) bool { return strings.HasPrefix(name, ".") }
