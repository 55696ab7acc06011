package fsplane

import (
	"cmp"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
)

// maxFindResults bounds /v1/file/find and maxGlobHits the matches
// /v1/file/glob collects before sorting; past either, truncated is true.
const (
	maxFindResults = 10_000
	maxGlobHits    = 200_000
)

// readPattern reads a required glob field and validates it.
func readPattern(f *api.Fields, name string) (string, *api.FieldError) {
	p := f.Str(name, true)
	if fe := f.Err(); fe != nil {
		return "", fe
	}
	if strings.HasPrefix(p, "/") {
		return "", badField(name, "must be relative to path, got "+quote(p))
	}
	if err := checkPattern(p); err != nil {
		return "", badField(name, err.Error())
	}
	return p, nil
}

// v1Find answers POST /v1/file/find {path, glob}: files and folders below
// path, at any depth, whose name matches glob (like find -name); a glob
// holding "/" is matched against the path relative to path instead, with
// "**" for any depth. Hidden entries are included. files is sorted.
func (s *server) v1Find(ctx *fasthttp.RequestCtx) {
	f := decodeV1(ctx)
	if f == nil {
		return
	}
	raw := f.Str("path", true)
	glob, fe := readPattern(f, "glob")
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	fsys, root, ok := s.pathV1(ctx, "find", raw)
	if !ok {
		return
	}
	byName := !strings.Contains(glob, "/")
	files, truncated := []string{}, false
	err := walkTree(fsys, root, true, 0, func(rel string, d fs.DirEntry) error {
		subject := rel
		if byName {
			subject = d.Name()
		}
		if !globMatch(glob, subject) {
			return nil
		}
		if len(files) == maxFindResults {
			return errWalkLimit
		}
		files = append(files, filepath.Join(root, rel))
		return nil
	})
	if errors.Is(err, errWalkLimit) {
		err, truncated = nil, true
	}
	if err != nil {
		s.failV1(ctx, "find", root, err)
		return
	}
	slices.Sort(files)
	okV1(ctx, "Found "+itoa(len(files))+" file(s)", map[string]any{"path": root, "files": files, "truncated": truncated})
}

// globInfo is the SDK's GlobFileInfo; size and modified_time are left out
// when include_metadata is false.
type globInfo struct {
	Path         string  `json:"path"`
	Name         string  `json:"name"`
	IsDirectory  bool    `json:"is_directory"`
	Size         *int64  `json:"size,omitempty"`
	ModifiedTime *string `json:"modified_time,omitempty"`
	size         int64
	mtime        time.Time
}

type globOpts struct {
	pattern                       string
	exclude                       []string
	hidden, filesOnly, meta, desc bool
	max                           int
	sortBy                        string
}

func readGlobOpts(f *api.Fields) (globOpts, *api.FieldError) {
	o := globOpts{
		exclude: f.StrList("exclude"), hidden: f.Bool("include_hidden", false),
		filesOnly: f.Bool("files_only", true), meta: f.Bool("include_metadata", true),
		desc: f.Bool("sort_desc", false), sortBy: f.Str("sort_by", false), max: 5000,
	}
	if n, ok := f.Int("max_results"); ok {
		if n < 1 || n > 50_000 {
			return o, badField("max_results", "must be between 1 and 50000")
		}
		o.max = int(n)
	}
	if fe := f.Err(); fe != nil {
		return o, fe
	}
	if fe := checkPatterns("exclude", o.exclude); fe != nil {
		return o, fe
	}
	switch o.sortBy {
	case "":
		o.sortBy = "path"
	case "path", "name", "size", "modified":
	default:
		return o, &api.FieldError{In: "body", Field: "sort_by", Type: "literal_error",
			Msg: "must be 'path', 'name', 'size' or 'modified', got " + quote(o.sortBy)}
	}
	var fe *api.FieldError
	o.pattern, fe = readPattern(f, "pattern")
	return o, fe
}

// v1Glob answers POST /v1/file/glob: entries whose path relative to path
// matches pattern (so "*.py" is the top level only, "**/*.py" any depth).
// An exclude glob matches the relative path, or the name when it has no
// "/"; an excluded folder is not entered. total_count counts every match,
// files holds the first max_results after sorting.
func (s *server) v1Glob(ctx *fasthttp.RequestCtx) {
	f := decodeV1(ctx)
	if f == nil {
		return
	}
	raw := f.Str("path", true)
	o, fe := readGlobOpts(f)
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	fsys, root, ok := s.pathV1(ctx, "glob", raw)
	if !ok {
		return
	}
	hits, truncated, err := collectGlob(fsys, root, o)
	if err != nil {
		s.failV1(ctx, "glob", root, err)
		return
	}
	sortGlob(hits, o.sortBy, o.desc)
	total := len(hits)
	if total > o.max {
		hits, truncated = hits[:o.max], true
	}
	okV1(ctx, "Found "+itoa(total)+" match(es)", map[string]any{
		"path": root, "pattern": o.pattern, "files": hits, "total_count": total, "truncated": truncated,
	})
}

func collectGlob(fsys FS, root string, o globOpts) ([]globInfo, bool, error) {
	depth := 0
	if !hasGlobstar(o.pattern) {
		depth = patternDepth(o.pattern)
	}
	hits := []globInfo{}
	err := walkTree(fsys, root, o.hidden, depth, func(rel string, d fs.DirEntry) error {
		if matchAny(o.exclude, rel, d.Name()) {
			return skipIfDir(d)
		}
		if (o.filesOnly && d.IsDir()) || !globMatch(o.pattern, rel) {
			return nil
		}
		gi := globInfo{Path: filepath.Join(root, rel), Name: d.Name(), IsDirectory: d.IsDir()}
		if info, err := d.Info(); err == nil {
			gi.size, gi.mtime = info.Size(), info.ModTime()
			if o.meta {
				mt := rfc3339(gi.mtime)
				gi.Size, gi.ModifiedTime = &gi.size, &mt
			}
		}
		if len(hits) == maxGlobHits {
			return errWalkLimit
		}
		hits = append(hits, gi)
		return nil
	})
	if errors.Is(err, errWalkLimit) {
		return hits, true, nil
	}
	return hits, false, err
}

func matchAny(patterns []string, rel, name string) bool {
	for _, ex := range patterns {
		if globMatch(ex, rel) || (!strings.Contains(ex, "/") && globMatch(ex, name)) {
			return true
		}
	}
	return false
}

func sortGlob(hits []globInfo, by string, desc bool) {
	slices.SortStableFunc(hits, func(a, b globInfo) int {
		c := 0
		switch by {
		case "name":
			c = strings.Compare(a.Name, b.Name)
		case "size":
			c = cmp.Compare(a.size, b.size)
		case "modified":
			c = a.mtime.Compare(b.mtime)
		}
		if c == 0 {
			c = strings.Compare(a.Path, b.Path)
		}
		if desc {
			return -c
		}
		return c
	})
}
