package fsplane

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestV1WriteRead(t *testing.T) {
	e := start(t, Config{})
	p := e.p("analysis", "sales.csv")
	code, m := e.post("/v1/file/write", map[string]any{"file": p, "content": salesCSV})
	d := okData(t, code, m)
	hasKeys(t, d, "file", "bytes_written")
	if d["file"] != p || num(t, d["bytes_written"]) != int64(len(salesCSV)) {
		t.Fatalf("write: %v", d)
	}
	code, m = e.post("/v1/file/read", map[string]any{"file": p, "start_line": nil, "end_line": nil, "sudo": nil})
	d = okData(t, code, m)
	hasKeys(t, d, "content", "file")
	if d["content"] != salesCSV || d["file"] != p || num(t, d["line_count"]) != 7 {
		t.Fatalf("read: %v", d)
	}
	code, m = e.post("/v1/file/read", map[string]any{"file": p, "start_line": 1, "end_line": 3})
	if c := okData(t, code, m)["content"]; c != "2026-01,120,80\n2026-02,135,82\n" {
		t.Fatalf("line range: %q", c)
	}
	code, m = e.post("/v1/file/read", map[string]any{"file": p, "start_line": "5"})
	if c := okData(t, code, m)["content"]; c != "2026-05,168,99\n2026-06,180,104\n" {
		t.Fatalf("start only: %q", c)
	}
}

func TestV1WriteModes(t *testing.T) {
	e := start(t, Config{})
	p := e.p("w.txt")
	e.post("/v1/file/write", map[string]any{"file": p, "content": "a", "leading_newline": true, "trailing_newline": true})
	e.post("/v1/file/write", map[string]any{"file": p, "content": "b", "append": true, "encoding": "utf-8"})
	if b, _ := os.ReadFile(p); string(b) != "\na\nb" {
		t.Fatalf("text modes: %q", b)
	}
	code, m := e.post("/v1/file/write", map[string]any{
		"file": e.p("p.png"), "content": base64.StdEncoding.EncodeToString(pngBytes), "encoding": "base64", "trailing_newline": true})
	if num(t, okData(t, code, m)["bytes_written"]) != int64(len(pngBytes)) {
		t.Fatalf("base64: %v", m)
	}
	if b, _ := os.ReadFile(e.p("p.png")); !bytes.Equal(b, pngBytes) {
		t.Fatalf("base64 bytes differ")
	}
	e.post("/v1/file/write", map[string]any{"file": e.p("raw.bin"), "content": "\u00ff\u0000A", "encoding": "raw"})
	if b, _ := os.ReadFile(e.p("raw.bin")); !bytes.Equal(b, []byte{0xff, 0, 'A'}) {
		t.Fatalf("raw: %v", b)
	}
	code, m = e.post("/v1/file/write", map[string]any{"file": e.p("r2"), "content": "€", "encoding": "raw"})
	wantLoc(t, detail(t, code, m), "body", "content")
	code, m = e.post("/v1/file/write", map[string]any{"file": e.p("r3"), "content": "%%%", "encoding": "base64"})
	wantLoc(t, detail(t, code, m), "body", "content")
}

// TestV1FileOperationErrors covers every error_type the file plane produces
// from a real failure, each with a complete FileOperationError.
func TestV1FileOperationErrors(t *testing.T) {
	e := start(t, Config{})
	writeTestFile(t, e.p("bad.txt"), "ok \xff\xfe bytes")
	writeTestFile(t, e.p("exists.txt"), "x")
	big := e.p("big.bin")
	f, _ := os.Create(big)
	_ = f.Truncate(maxRead + 1) // sparse: costs no disk
	f.Close()
	cases := []struct {
		name, route string
		body        map[string]any
		kind        string
		errno       int64
		exc         string
	}{
		{"read missing", "/v1/file/read", map[string]any{"file": e.p("nope.txt")}, "not_found", 2, "FileNotFoundError"},
		{"read a folder", "/v1/file/read", map[string]any{"file": e.dir}, "invalid_target", 21, "IsADirectoryError"},
		{"write over a folder", "/v1/file/write", map[string]any{"file": e.dir, "content": "x"}, "invalid_target", 21, "IsADirectoryError"},
		{"write under a file", "/v1/file/write", map[string]any{"file": e.p("exists.txt", "x"), "content": "x"}, "invalid_target", 20, "NotADirectoryError"},
		{"list a file", "/v1/file/list", map[string]any{"path": e.p("exists.txt")}, "invalid_target", 20, "NotADirectoryError"},
		{"create existing", "/v1/file/str_replace_editor", map[string]any{"command": "create", "path": e.p("exists.txt"), "file_text": "y"}, "already_exists", 17, "FileExistsError"},
		{"read not UTF-8", "/v1/file/read", map[string]any{"file": e.p("bad.txt")}, "decode_error", -1, "UnicodeDecodeError"},
		{"relative path", "/v1/file/read", map[string]any{"file": "rel.txt"}, "invalid_path", 22, "ValueError"},
		{"read too large", "/v1/file/read", map[string]any{"file": big}, "io_error", 27, "OSError"},
		{"replace missing", "/v1/file/replace", map[string]any{"file": e.p("nope"), "old_str": "a", "new_str": "b"}, "not_found", 2, "FileNotFoundError"},
		{"search missing", "/v1/file/search", map[string]any{"file": e.p("nope"), "regex": "a"}, "not_found", 2, "FileNotFoundError"},
		{"grep missing", "/v1/file/grep", map[string]any{"path": e.p("nope"), "pattern": "a"}, "not_found", 2, "FileNotFoundError"},
		{"glob missing", "/v1/file/glob", map[string]any{"path": e.p("nope"), "pattern": "*"}, "not_found", 2, "FileNotFoundError"},
		{"find missing", "/v1/file/find", map[string]any{"path": e.p("nope"), "glob": "*"}, "not_found", 2, "FileNotFoundError"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, m := e.post(c.route, c.body)
			d := fileOpError(t, code, m, c.kind)
			if d["exception_type"] != c.exc {
				t.Errorf("exception_type = %v, want %s", d["exception_type"], c.exc)
			}
			if c.errno < 0 {
				if d["errno"] != nil || d["errno_name"] != nil {
					t.Errorf("errno should be null: %v", d)
				}
				return
			}
			if num(t, d["errno"]) != c.errno || !isStr(d["errno_name"]) {
				t.Errorf("errno = %v %v, want %d", d["errno"], d["errno_name"], c.errno)
			}
		})
	}
	code, m := e.post("/v1/file/read", map[string]any{"file": e.p("nope.txt")})
	if d := fileOpError(t, code, m, "not_found"); d["errno_name"] != "ENOENT" || d["operation"] != "read" || d["retryable"] != false {
		t.Errorf("not_found details: %v", d)
	}
	code, m = e.post("/v1/file/read", map[string]any{"file": big})
	if msg := fileOpError(t, code, m, "io_error")["message"].(string); !bytes.Contains([]byte(msg), []byte("64 MiB")) {
		t.Errorf("too-large message should name the limit: %q", msg)
	}
}

func TestV1PermissionDeniedWithRoot(t *testing.T) {
	outside := t.TempDir()
	writeTestFile(t, filepath.Join(outside, "s.txt"), "secret")
	root := t.TempDir()
	e := start(t, Config{Root: root})
	os.Symlink(filepath.Join(outside, "s.txt"), filepath.Join(root, "s.txt"))
	os.Symlink(filepath.Join(outside, "new.txt"), filepath.Join(root, "dangling.txt"))
	for _, c := range []struct{ route, field, path string }{
		{"/v1/file/read", "file", filepath.Join(outside, "s.txt")},
		{"/v1/file/read", "file", filepath.Join(root, "s.txt")},
		{"/v1/file/read", "file", filepath.Join(root, "..", filepath.Base(outside), "s.txt")},
		{"/v1/file/list", "path", outside},
	} {
		code, m := e.post(c.route, map[string]any{c.field: c.path})
		d := fileOpError(t, code, m, "permission_denied")
		if d["errno_name"] != "EACCES" || d["exception_type"] != "PermissionError" {
			t.Errorf("%s %s: %v", c.route, c.path, d)
		}
	}
	code, m := e.post("/v1/file/write", map[string]any{"file": filepath.Join(root, "dangling.txt"), "content": "x"})
	fileOpError(t, code, m, "permission_denied")
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); !os.IsNotExist(err) {
		t.Fatalf("a write through a dangling link escaped the root")
	}
	code, m = e.post("/v1/file/write", map[string]any{"file": filepath.Join(root, "sub", "ok.txt"), "content": "x"})
	okData(t, code, m)
}

// Test422Shapes: bad fields answer FastAPI's detail list; empty bodies,
// Content-Length 0 and nulls for optional fields are accepted.
func Test422Shapes(t *testing.T) {
	e := start(t, Config{})
	code, m := e.post("/v1/file/read", map[string]any{"start_line": 1})
	d := detail(t, code, m)
	wantLoc(t, d, "body", "file")
	if d["type"] != "missing" {
		t.Errorf("type = %v", d["type"])
	}
	for _, body := range []string{"", "null", "{}"} {
		code, m = e.post("/v1/file/write", body)
		wantLoc(t, detail(t, code, m), "body", "file")
	}
	code, m = e.post("/v1/file/read", `{"file": 12}`)
	if d := detail(t, code, m); d["type"] != "string_type" {
		t.Errorf("wrong type: %v", d)
	}
	code, m = e.post("/v1/file/read", `{"file": "/x",`)
	if d := detail(t, code, m); d["type"] != "json_invalid" {
		t.Errorf("malformed JSON: %v", d)
	}
	code, m = e.post("/v1/file/read", map[string]any{"file": "/x", "start_line": 1.5})
	wantLoc(t, detail(t, code, m), "body", "start_line")
	code, m = e.post("/v1/file/list", map[string]any{"path": e.dir, "sort_by": "colour"})
	wantLoc(t, detail(t, code, m), "body", "sort_by")

	// Content-Length: 0 with a JSON content type, as httpx sends it.
	code, b, _ := e.do("POST", "/v1/file/list", "application/json", nil)
	wantLoc(t, detail(t, code, decodeMap(t, b)), "body", "path")
	code, m = e.post("/v1/file/list", map[string]any{"path": e.dir, "recursive": nil, "show_hidden": nil,
		"file_types": nil, "max_depth": nil, "include_size": nil, "sort_by": nil, "sort_desc": nil})
	okData(t, code, m)
}

func TestV1Download(t *testing.T) {
	e := start(t, Config{})
	p := e.p("plot.png")
	writeTestFile(t, p, string(pngBytes))
	for _, policy := range []string{"", "ignore", "abort"} {
		q := url.Values{"path": {p}}
		if policy != "" {
			q.Set("change_policy", policy)
		}
		code, body, h := e.get("/v1/file/download", q)
		if code != 200 || !bytes.Equal(body, pngBytes) {
			t.Fatalf("policy %q: %d %q", policy, code, body)
		}
		if h.Get("Content-Disposition") != `attachment; filename="plot.png"` {
			t.Errorf("Content-Disposition = %q", h.Get("Content-Disposition"))
		}
	}
	code, m := e.getJSON("/v1/file/download", nil)
	wantLoc(t, detail(t, code, m), "query", "path")
	code, m = e.getJSON("/v1/file/download", url.Values{"path": {"rel.png"}})
	wantLoc(t, detail(t, code, m), "query", "path")
	code, m = e.getJSON("/v1/file/download", url.Values{"path": {p}, "change_policy": {"maybe"}})
	wantLoc(t, detail(t, code, m), "query", "change_policy")

	code, m = e.getJSON("/v1/file/download", url.Values{"path": {e.p("nope")}})
	if code != 404 || m["success"] != false || obj(t, m["data"])["error_type"] != "not_found" {
		t.Fatalf("missing: %d %v", code, m)
	}
	code, m = e.getJSON("/v1/file/download", url.Values{"path": {e.dir}})
	if code != 400 || obj(t, m["data"])["error_type"] != "invalid_target" {
		t.Fatalf("folder: %d %v", code, m)
	}
}

// TestV1DownloadChanged: with change_policy=abort, a change between the
// stat and the open is a 409 (the view changes the file right after the
// download's first stat of it, in that window).
func TestV1DownloadChanged(t *testing.T) {
	fsys := &changeAfterStat{FS: NewHostFS(""), base: "grow.txt"}
	e := start(t, Config{View: func(*fasthttp.RequestCtx) (FS, error) { return fsys, nil }})
	p := e.p("grow.txt")
	writeTestFile(t, p, "v1")
	code, m := e.getJSON("/v1/file/download", url.Values{"path": {p}, "change_policy": {"abort"}})
	if code != 409 || m["success"] != false || obj(t, m["data"])["retryable"] != true {
		t.Fatalf("want 409, got %d %v", code, m)
	}
}

func TestV1Upload(t *testing.T) {
	ws := t.TempDir()
	e := start(t, Config{Workspace: ws})
	code, m := e.upload("/v1/file/upload", "data.csv", []byte(salesCSV), "")
	d := okData(t, code, m)
	hasKeys(t, d, "file_path", "file_size", "success")
	if d["file_path"] != filepath.Join(ws, "data.csv") || num(t, d["file_size"]) != int64(len(salesCSV)) || d["success"] != true {
		t.Fatalf("upload: %v", d)
	}
	code, m = e.upload("/v1/file/upload", "../../evil.sh", []byte("x"), e.p("in")+"/")
	if okData(t, code, m)["file_path"] != e.p("in", "evil.sh") {
		t.Fatalf("name not reduced to its base: %v", m)
	}
	code, b, _ := e.do("POST", "/v1/file/upload", "application/json", []byte(`{}`))
	wantLoc(t, detail(t, code, decodeMap(t, b)), "body", "file")
	code, m = e.upload("/v1/file/upload", "x", []byte("x"), "relative/x")
	fileOpError(t, code, m, "invalid_path")
}

// changeAfterStat is an FS that rewrites the file named base right after
// its first Stat (which still describes the file as it was).
type changeAfterStat struct {
	FS
	base string
	once sync.Once
}

func (c *changeAfterStat) Stat(name string) (fs.FileInfo, error) {
	fi, err := c.FS.Stat(name)
	if filepath.Base(name) == c.base {
		c.once.Do(func() { err = errors.Join(err, os.WriteFile(name, []byte("version 2"), 0o644)) })
	}
	return fi, err
}
