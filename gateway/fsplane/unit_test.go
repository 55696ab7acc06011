package fsplane

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		pattern, rel string
		want         bool
	}{
		{"*.py", "a.py", true},
		{"*.py", "pkg/a.py", false},
		{"**/*.py", "a.py", true},
		{"**/*.py", "pkg/sub/a.py", true},
		{"pkg/**", "pkg/a/b", true},
		{"pkg/**/c.txt", "pkg/c.txt", true},
		{"**/**/**/x", "a/b/x", true},
		{"*.{py,md}", "notes.md", true},
		{"{a,b{c,d}}.txt", "bd.txt", true},
		{"{a,b{c,d}}.txt", "b.txt", false},
		{"[ab]?.go", "bz.go", true},
		{`\{x}`, "{x}", true},
	}
	for _, c := range cases {
		if got := globMatch(c.pattern, c.rel); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.rel, got, c.want)
		}
	}
	if checkPattern("[a-") == nil || checkPattern("") == nil || checkPattern("ok/**/*.go") != nil {
		t.Errorf("checkPattern")
	}
	if n := len(expandBraces(strings.Repeat("{a,b}", 20))); n != maxBraceAlts {
		t.Errorf("brace expansion not bounded: %d", n)
	}
}

func TestContentDisposition(t *testing.T) {
	for in, want := range map[string]string{
		"plot.png":   `attachment; filename="plot.png"`,
		`a"b\c.txt`:  `attachment; filename="a\"b\\c.txt"`,
		"图表.png":     `attachment; filename="__.png"; filename*=UTF-8''%E5%9B%BE%E8%A1%A8.png`,
		"tab\there":  `attachment; filename="tab_here"; filename*=UTF-8''tab%09here`,
		"semi;c=1,x": `attachment; filename="semi;c=1,x"`,
	} {
		if got := contentDisposition(in); got != want {
			t.Errorf("contentDisposition(%q) = %s\nwant %s", in, got, want)
		}
	}
}

func TestClassifyErrno(t *testing.T) {
	cases := []struct {
		err  error
		kind string
	}{
		{syscall.EROFS, kindReadOnly},
		{syscall.ENOSPC, kindNoSpace},
		{syscall.EDQUOT, kindNoSpace},
		{syscall.ENAMETOOLONG, kindInvalidPath},
		{syscall.EACCES, kindPermission},
		{syscall.EEXIST, kindExists},
		{syscall.EIO, kindIO},
		{fs.ErrNotExist, kindNotFound},
		{fmt.Errorf("wrapped: %w", &fs.PathError{Op: "open", Path: "/x", Err: syscall.EPERM}), kindPermission},
	}
	for _, c := range cases {
		if got := classify(c.err).kind; got != c.kind {
			t.Errorf("classify(%v) = %s, want %s", c.err, got, c.kind)
		}
	}
	fe := fileError("write", "/x", syscall.EAGAIN)
	if !fe.Retryable || *fe.ErrnoName != "EAGAIN" || fe.ErrorType != kindIO {
		t.Errorf("EAGAIN: %+v", fe)
	}
	if v2Status(classify(errTooLarge(10))) != 413 {
		t.Errorf("too large should be 413 on v2")
	}
}

func TestHistoryBounds(t *testing.T) {
	h := newHistory(2, 10)
	h.push("/a", []byte("1111"), true)
	h.push("/a", []byte("2222"), true)
	h.push("/a", []byte("3333"), true) // per-path bound drops "1111"
	h.push("/b", []byte("44"), true)   // 10 bytes in all
	h.push("/b", []byte("555"), true)  // over budget: the oldest ("2222") goes
	h.push("/c", []byte(strings.Repeat("x", 11)), true)
	if s, ok := h.pop("/a"); !ok || string(s.content) != "3333" {
		t.Fatalf("pop /a = %q %v", s.content, ok)
	}
	if _, ok := h.pop("/a"); ok {
		t.Fatalf("/a should be empty")
	}
	if _, ok := h.pop("/c"); ok {
		t.Fatalf("content over the budget should not be kept")
	}
	if s, _ := h.pop("/b"); string(s.content) != "555" || h.used != 2 {
		t.Fatalf("pop /b = %q, used %d", s.content, h.used)
	}
}

// TestGuardedFileCutsChangedStream: with change_policy=abort, a file that
// changes while it streams fails the read at the end, which makes fasthttp
// cut the connection.
func TestGuardedFileCutsChangedStream(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	host := NewHostFS("")
	src, err := openFile(host, p)
	if err != nil {
		t.Fatal(err)
	}
	g := &guardedFile{f: src.f, fsys: host, path: p, size: src.info.Size(), mtime: src.info.ModTime()}
	defer g.Close()
	if err := os.WriteFile(p, []byte("0123456789 and more"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(io.LimitReader(g, 1<<20)); !errors.Is(err, errChanged) {
		t.Fatalf("want errChanged, got %v", err)
	}
}
