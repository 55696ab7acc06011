package fsplane

import (
	"bytes"
	"errors"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
)

// binarySniff is how much of a file is checked for a NUL byte.
const binarySniff = 8 << 10

// grepMatch is the SDK's GrepMatch; line_number is 1-based.
type grepMatch struct {
	File          string   `json:"file"`
	LineNumber    int      `json:"line_number"`
	LineContent   string   `json:"line_content"`
	ContextBefore []string `json:"context_before"`
	ContextAfter  []string `json:"context_after"`
}

// grepRun holds one search's progress. Owned by the handler's goroutine.
type grepRun struct {
	o                 grepOpts
	fsys              FS
	root              string
	matches           []grepMatch
	seen              int // matches found, offset included
	searched, matched int
	truncated         bool
}

var errGrepFull = errors.New("grep result full")

// v1Grep answers POST /v1/file/grep, a ripgrep-like search in pure Go
// (RE2 syntax). Like ripgrep it skips hidden entries, symlinks, binary files
// (a NUL in the first 8 KiB) and files over max_file_size; it does not read
// .gitignore. match_count is the number of matches returned; truncated says
// more existed past offset + max_results.
func (s *server) v1Grep(ctx *fasthttp.RequestCtx) {
	f := decodeV1(ctx)
	if f == nil {
		return
	}
	raw := f.Str("path", true)
	o, fe := readGrepOpts(f)
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	fsys, root, ok := s.pathV1(ctx, "grep", raw)
	if !ok {
		return
	}
	g := &grepRun{o: o, fsys: fsys, root: root, matches: []grepMatch{}}
	if err := g.run(); err != nil {
		s.failV1(ctx, "grep", root, err)
		return
	}
	okV1(ctx, "Found "+itoa(len(g.matches))+" match(es)", map[string]any{
		"path": root, "pattern": o.pattern, "matches": g.matches, "match_count": len(g.matches),
		"files_searched": g.searched, "files_matched": g.matched, "truncated": g.truncated,
	})
}

func (g *grepRun) run() error {
	fi, err := g.fsys.Stat(g.root)
	if err != nil {
		return err
	}
	switch {
	case !fi.IsDir() && !fi.Mode().IsRegular():
		return errSpecial(fi.Mode()) // asked for by name: say why not
	case !fi.IsDir(): // a single file is searched whatever its name
		err = g.file(g.root, fi.Size(), true)
	default:
		depth := 0
		if !g.o.recurs {
			depth = 1
		}
		err = walkTree(g.fsys, g.root, false, depth, g.visit)
	}
	if errors.Is(err, errGrepFull) || errors.Is(err, errWalkLimit) {
		g.truncated = true
		return nil
	}
	return err
}

func (g *grepRun) visit(rel string, d fs.DirEntry) error {
	if !d.Type().IsRegular() {
		return nil
	}
	name := d.Name()
	if len(g.o.include) > 0 && !matchAny(g.o.include, rel, name) {
		return nil
	}
	if matchAny(g.o.exclude, rel, name) || (len(g.o.types) > 0 && !matchAny(g.o.types, rel, name)) {
		return nil
	}
	info, err := d.Info()
	if err != nil || info.Size() > g.o.maxSize {
		return nil
	}
	return g.file(filepath.Join(g.root, rel), info.Size(), false)
}

// file searches one file; unreadable, too large and binary files are
// skipped. A file asked for by name (named) that is no file to read, such
// as /proc/self/mem, is the answer's error instead.
func (g *grepRun) file(path string, size int64, named bool) error {
	if size > g.o.maxSize {
		return nil
	}
	b, err := readAll(g.fsys, path, g.o.maxSize)
	if err != nil && named && classify(err).kind == kindTarget {
		return err
	}
	if err != nil || bytes.IndexByte(b[:min(len(b), binarySniff)], 0) >= 0 {
		return nil
	}
	g.searched++
	before := g.seen
	if g.o.multiline {
		err = g.multi(path, b)
	} else {
		err = g.lines(path, b)
	}
	if g.seen > before {
		g.matched++
	}
	return err
}

func (g *grepRun) lines(path string, b []byte) error {
	lines := splitLines(b)
	for i, line := range lines {
		if g.o.re.Match(line) {
			if err := g.add(path, lines, i, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// multi matches the whole file; a match is reported at its first line and
// line_content holds every line it spans.
func (g *grepRun) multi(path string, b []byte) error {
	lines := splitLines(b)
	starts := lineStarts(b)
	last := -1
	for _, loc := range g.o.re.FindAllIndex(b, -1) {
		first := lineOf(starts, loc[0])
		end := lineOf(starts, max(loc[0], loc[1]-1))
		if first == last || first >= len(lines) {
			continue
		}
		last = first
		if err := g.add(path, lines, first, min(end, len(lines)-1)); err != nil {
			return err
		}
	}
	return nil
}

// add records a match spanning lines first..end, honouring offset and max.
func (g *grepRun) add(path string, lines [][]byte, first, end int) error {
	g.seen++
	if g.seen <= g.o.offset {
		return nil
	}
	if len(g.matches) == g.o.max {
		return errGrepFull
	}
	content := make([]string, 0, end-first+1)
	for _, l := range lines[first : end+1] {
		content = append(content, textOf(l))
	}
	g.matches = append(g.matches, grepMatch{
		File: path, LineNumber: first + 1, LineContent: strings.Join(content, "\n"),
		ContextBefore: texts(lines[max(0, first-g.o.before):first]),
		ContextAfter:  texts(lines[end+1 : min(len(lines), end+1+g.o.after)]),
	})
	return nil
}

func texts(lines [][]byte) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		out = append(out, textOf(l))
	}
	return out
}

// lineStarts is the byte offset where each line begins.
func lineStarts(b []byte) []int {
	starts := []int{0}
	for i, c := range b {
		if c == '\n' && i+1 < len(b) {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// lineOf is the 0-based line holding byte offset off.
func lineOf(starts []int, off int) int {
	return sort.Search(len(starts), func(i int) bool { return starts[i] > off }) - 1
}
