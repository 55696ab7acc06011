package fsplane

import (
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
)

// Glob patterns are slash-separated and relative. Within a segment the
// syntax is Go's path.Match (*, ?, [a-z], \ escapes); a segment that is
// exactly "**" matches any number of segments, zero included; {a,b}
// alternatives are expanded first (nesting allowed, at most maxBraceAlts).
const (
	maxPatternLen = 1024
	maxBraceAlts  = 256
	// maxWalkEntries bounds one tree walk (find, glob, grep) so a search from
	// "/" ends; past it the answer says truncated.
	maxWalkEntries = 1_000_000
)

var errWalkLimit = errors.New("walk limit reached")

// checkPattern validates a glob; the error text is for a 422 message.
func checkPattern(p string) error {
	if p == "" {
		return errors.New("must not be empty")
	}
	if len(p) > maxPatternLen {
		return errors.New("is longer than " + itoa(maxPatternLen) + " characters")
	}
	for _, alt := range expandBraces(p) {
		for _, seg := range strings.Split(alt, "/") {
			if _, err := path.Match(seg, "x"); err != nil {
				return errors.New("is not a valid glob: bad segment " + quote(seg))
			}
		}
	}
	return nil
}

// globMatch reports whether the slash-separated relative path rel matches.
func globMatch(pattern, rel string) bool {
	segs := strings.Split(rel, "/")
	for _, alt := range expandBraces(pattern) {
		if matchSegs(compactStars(strings.Split(alt, "/")), segs) {
			return true
		}
	}
	return false
}

func matchSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], segs[0]); err != nil || !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// compactStars folds "**/**" into one "**", keeping matchSegs polynomial.
func compactStars(segs []string) []string {
	out := segs[:0:0]
	for _, s := range segs {
		if s == "**" && len(out) > 0 && out[len(out)-1] == "**" {
			continue
		}
		out = append(out, s)
	}
	return out
}

// hasGlobstar reports whether any alternative has a "**" segment.
func hasGlobstar(pattern string) bool {
	for _, alt := range expandBraces(pattern) {
		for _, seg := range strings.Split(alt, "/") {
			if seg == "**" {
				return true
			}
		}
	}
	return false
}

// patternDepth is the most segments any alternative has.
func patternDepth(pattern string) int {
	n := 0
	for _, alt := range expandBraces(pattern) {
		n = max(n, strings.Count(alt, "/")+1)
	}
	return n
}

// expandBraces expands the first top-level {a,b} group, recursively.
func expandBraces(p string) []string {
	open, closing, parts := braceGroup(p)
	if open < 0 {
		return []string{p}
	}
	var out []string
	for _, part := range parts {
		if len(out) == maxBraceAlts {
			return out // stop before expanding more: the cap keeps this linear
		}
		for _, tail := range expandBraces(p[:open] + part + p[closing+1:]) {
			if len(out) == maxBraceAlts {
				return out
			}
			out = append(out, tail)
		}
	}
	return out
}

// braceGroup finds the first balanced {...} holding a top-level comma and
// splits it; open is -1 when there is none.
func braceGroup(p string) (open, closing int, parts []string) {
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' {
			i++
			continue
		}
		if p[i] != '{' {
			continue
		}
		depth, start := 0, i+1
		for j := i; j < len(p); j++ {
			switch p[j] {
			case '\\':
				j++
			case '{':
				depth++
			case '}':
				depth--
				if depth == 0 {
					parts = append(parts, p[start:j])
					if len(parts) > 1 {
						return i, j, parts
					}
					j = len(p) // no comma: not a group; look further
				}
			case ',':
				if depth == 1 {
					parts = append(parts, p[start:j])
					start = j + 1
				}
			}
		}
		parts = nil
	}
	return -1, -1, nil
}

// walkFunc sees each entry below the root with its slash-separated
// relative path. Returning fs.SkipDir on a folder prunes it.
type walkFunc func(rel string, d fs.DirEntry) error

// walkTree visits root's tree in fsys in lexical order without following
// symlinks (root itself may be one). Hidden entries are skipped (and not
// entered) unless hidden is true. maxDepth > 0 stops descending at that
// many segments. Unreadable subfolders are left out. It stops with
// errWalkLimit after maxWalkEntries. fn returning fs.SkipDir skips a
// folder, or the rest of the folder holding a file, as in fs.WalkDir.
func walkTree(fsys FS, root string, hidden bool, maxDepth int, fn walkFunc) error {
	fi, err := fsys.Stat(root)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errNotDir()
	}
	des, err := fsys.ReadDir(root)
	if err != nil {
		return err
	}
	w := &walker{fsys: fsys, hidden: hidden, maxDepth: maxDepth, fn: fn}
	return w.dir(root, "", des)
}

// walker is one walkTree's state.
type walker struct {
	fsys     FS
	hidden   bool
	maxDepth int
	fn       walkFunc
	seen     int
}

// dir visits the entries of the folder at path (rel below the root).
func (w *walker) dir(path, rel string, des []fs.DirEntry) error {
	for _, d := range des {
		if w.seen++; w.seen > maxWalkEntries {
			return errWalkLimit
		}
		if !w.hidden && isHidden(d.Name()) {
			continue
		}
		r := d.Name()
		if rel != "" {
			r = rel + "/" + r
		}
		err := w.fn(r, d)
		if errors.Is(err, fs.SkipDir) {
			if d.IsDir() {
				continue
			}
			return nil
		}
		if err != nil {
			return err
		}
		if !d.IsDir() || (w.maxDepth > 0 && strings.Count(r, "/")+1 >= w.maxDepth) {
			continue
		}
		sub := filepath.Join(path, d.Name())
		subs, err := w.fsys.ReadDir(sub)
		if err != nil {
			continue // unreadable folder: left out
		}
		if err := w.dir(sub, r, subs); err != nil {
			return err
		}
	}
	return nil
}

func skipIfDir(d fs.DirEntry) error {
	if d.IsDir() {
		return fs.SkipDir
	}
	return nil
}
