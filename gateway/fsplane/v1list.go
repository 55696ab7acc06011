package fsplane

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
)

// maxListEntries bounds one recursive listing; past it the answer carries
// truncated: true.
const maxListEntries = 100_000

// fileInfo is the SDK's FileInfo. size is null when include_size is false;
// permissions is present only when include_permissions is true.
type fileInfo struct {
	Name         string    `json:"name"`
	Path         string    `json:"path"`
	IsDirectory  bool      `json:"is_directory"`
	Size         *int64    `json:"size"`
	ModifiedTime string    `json:"modified_time"`
	Permissions  *string   `json:"permissions,omitempty"`
	Extension    string    `json:"extension"`
	sortExt      string    // lower-case extension, for sort_by type
	mtime        time.Time // for sort_by modified
}

type listOpts struct {
	recursive, hidden, size, perms, desc bool
	types                                []string // lower case, with the dot
	maxDepth                             int64    // 0 means no limit
	sortBy                               string
}

func readListOpts(f *api.Fields) (listOpts, *api.FieldError) {
	o := listOpts{
		recursive: f.Bool("recursive", false),
		hidden:    f.Bool("show_hidden", true),
		size:      f.Bool("include_size", true),
		perms:     f.Bool("include_permissions", false),
		desc:      f.Bool("sort_desc", false),
		sortBy:    f.Str("sort_by", false),
	}
	for _, t := range f.StrList("file_types") {
		t = strings.ToLower(strings.TrimSpace(t))
		if t != "" && !strings.HasPrefix(t, ".") {
			t = "." + t
		}
		o.types = append(o.types, t)
	}
	if d, ok := f.Int("max_depth"); ok {
		if d < 1 {
			return o, badField("max_depth", "must be at least 1")
		}
		o.maxDepth = d
	}
	if fe := f.Err(); fe != nil {
		return o, fe
	}
	switch o.sortBy {
	case "":
		o.sortBy = "name"
	case "name", "size", "modified", "type":
	default:
		return o, &api.FieldError{In: "body", Field: "sort_by", Type: "literal_error",
			Msg: "must be 'name', 'size', 'modified' or 'type', got " + quote(o.sortBy)}
	}
	return o, nil
}

// v1List answers POST /v1/file/list. file_types filters files only; folders
// are always listed. A recursive listing does not descend into symlinked
// folders (no loops) nor, without show_hidden, into hidden ones.
func (s *server) v1List(ctx *fasthttp.RequestCtx) {
	f := decodeV1(ctx)
	if f == nil {
		return
	}
	raw := f.Str("path", true)
	o, fe := readListOpts(f)
	if fe == nil {
		fe = f.Err()
	}
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	fsys, p, ok := s.pathV1(ctx, "list", raw)
	if !ok {
		return
	}
	files, truncated, err := collectList(fsys, p, o)
	if err != nil {
		s.failV1(ctx, "list", p, err)
		return
	}
	sortList(files, o.sortBy, o.desc)
	dirs := 0
	for _, fi := range files {
		if fi.IsDirectory {
			dirs++
		}
	}
	okV1(ctx, "Directory listed successfully", map[string]any{
		"path": p, "files": files, "total_count": len(files),
		"directory_count": dirs, "file_count": len(files) - dirs, "truncated": truncated,
	})
}

func collectList(fsys FS, root string, o listOpts) ([]fileInfo, bool, error) {
	out := []fileInfo{}
	type dir struct {
		path  string
		depth int64
	}
	queue := []dir{{root, 1}}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		entries, err := readDirEntries(fsys, d.path)
		if err != nil {
			if d.path == root {
				return nil, false, err
			}
			continue // a subfolder we cannot read is left out
		}
		for _, e := range entries {
			if !o.hidden && isHidden(e.name) {
				continue
			}
			if len(out) >= maxListEntries {
				return out, true, nil
			}
			if o.recursive && e.isDir && !e.isLink() && (o.maxDepth == 0 || d.depth < o.maxDepth) {
				queue = append(queue, dir{e.path, d.depth + 1})
			}
			if !e.isDir && len(o.types) > 0 && !slices.Contains(o.types, strings.ToLower(pyExt(e.name))) {
				continue
			}
			out = append(out, toFileInfo(e, o))
		}
	}
	return out, false, nil
}

func toFileInfo(e entry, o listOpts) fileInfo {
	fi := fileInfo{
		Name: e.name, Path: e.path, IsDirectory: e.isDir,
		ModifiedTime: rfc3339(e.info.ModTime()),
	}
	if !e.isDir {
		fi.Extension = pyExt(e.name)
	}
	fi.sortExt, fi.mtime = strings.ToLower(fi.Extension), e.info.ModTime()
	if o.size {
		n := e.info.Size()
		fi.Size = &n
	}
	if o.perms {
		ps := permString(e.lmode)
		fi.Permissions = &ps
	}
	return fi
}

// sortList orders by the key, ties by path; "type" puts folders first, then
// groups files by extension.
func sortList(files []fileInfo, by string, desc bool) {
	key := func(a, b fileInfo) int {
		switch by {
		case "size":
			return cmp.Compare(derefSize(a.Size), derefSize(b.Size))
		case "modified":
			return a.mtime.Compare(b.mtime)
		case "type":
			if a.IsDirectory != b.IsDirectory {
				if a.IsDirectory {
					return -1
				}
				return 1
			}
			if c := strings.Compare(a.sortExt, b.sortExt); c != 0 {
				return c
			}
		}
		return strings.Compare(a.Name, b.Name)
	}
	slices.SortStableFunc(files, func(a, b fileInfo) int {
		c := key(a, b)
		if c == 0 {
			c = strings.Compare(a.Path, b.Path)
		}
		if desc {
			return -c
		}
		return c
	})
}

func derefSize(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
