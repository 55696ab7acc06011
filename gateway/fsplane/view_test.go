package fsplane

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
)

// fakeFS is a view whose paths lead below a host folder, and which records
// every call. It tests the seam, not a route's behaviour (the routes'
// tests run on HostFS): its names do not exist on the host, so a route
// that reached around the view would fail.
type fakeFS struct {
	base string

	mu    sync.Mutex
	calls []string // "Op name", in order
}

func (f *fakeFS) on(op, name string) string {
	f.mu.Lock()
	f.calls = append(f.calls, op+" "+name)
	f.mu.Unlock()
	return filepath.Join(f.base, name)
}

// take returns the calls recorded since the last take.
func (f *fakeFS) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func (f *fakeFS) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(f.on("OpenFile", name), flag, perm)
}
func (f *fakeFS) Stat(name string) (fs.FileInfo, error)  { return os.Stat(f.on("Stat", name)) }
func (f *fakeFS) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(f.on("Lstat", name)) }
func (f *fakeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	return os.ReadDir(f.on("ReadDir", name))
}
func (f *fakeFS) MkdirAll(name string, perm fs.FileMode) error {
	return os.MkdirAll(f.on("MkdirAll", name), perm)
}
func (f *fakeFS) Remove(name string) error    { return os.Remove(f.on("Remove", name)) }
func (f *fakeFS) RemoveAll(name string) error { return os.RemoveAll(f.on("RemoveAll", name)) }
func (f *fakeFS) Readlink(name string) (string, error) {
	return os.Readlink(f.on("Readlink", name))
}

// viewRoot is the fake view's folder; it must not exist on the host.
const viewRoot = "/aiod-fsplane-view-test"

// TestEveryRouteGoesThroughTheView drives every route, and Files, with a
// View hook that returns a fakeFS: each request calls the hook once, and
// each touches files only through the view.
func TestEveryRouteGoesThroughTheView(t *testing.T) {
	if _, err := os.Lstat(viewRoot); err == nil {
		t.Fatalf("%s exists on the host; the test needs it not to", viewRoot)
	}
	t.Cleanup(func() {
		if _, err := os.Lstat(viewRoot); err == nil {
			os.RemoveAll(viewRoot)
			t.Errorf("a route reached around the view and made %s on the host", viewRoot)
		}
	})
	fake := &fakeFS{base: t.TempDir()}
	var hooked atomic.Int64
	e := start(t, Config{Workspace: viewRoot + "/home", View: func(*fasthttp.RequestCtx) (FS, error) {
		hooked.Add(1)
		return fake, nil
	}})
	d := viewRoot + "/data"
	writeTestFile(t, filepath.Join(fake.base, d, "notes.txt"), "alpha\nbeta\n")
	step := func(name string, ok bool) {
		t.Helper()
		if n := hooked.Swap(0); n != 1 {
			t.Errorf("%s: the hook ran %d times, want once", name, n)
		}
		calls := fake.take()
		if len(calls) == 0 {
			t.Errorf("%s: no call reached the view", name)
		}
		for _, c := range calls {
			if _, name, _ := strings.Cut(c, " "); !strings.HasPrefix(name, viewRoot) {
				t.Errorf("%s: view call %q is not below %s", name, c, viewRoot)
			}
		}
		if !ok {
			t.Errorf("%s failed", name)
		}
	}
	v2 := func(code int, m map[string]any) bool { return code == 200 && m["success"] == true }

	code, m := e.post("/v2/fs/write", map[string]any{"path": d + "/w.txt", "content": "one\ntwo\n"})
	step("v2 write", v2(code, m))
	code, m = e.getJSON("/v2/fs/read", url.Values{"path": {d + "/w.txt"}})
	step("v2 read", v2(code, m) && obj(t, m["data"])["content"] == "one\ntwo\n")
	code, m = e.post("/v2/fs/read", map[string]any{"path": d + "/w.txt", "start_line": 2})
	step("v2 read POST", v2(code, m) && obj(t, m["data"])["content"] == "two\n")
	code, m = e.getJSON("/v2/fs/list", url.Values{"path": {d}})
	step("v2 list", v2(code, m) && len(list(t, obj(t, m["data"])["files"])) == 2)
	code, body, _ := e.get("/v2/fs/download", url.Values{"path": {d + "/w.txt"}})
	step("v2 download", code == 200 && string(body) == "one\ntwo\n")
	code, m = e.upload("/v2/fs/upload", "up.txt", []byte("up"), d+"/")
	step("v2 upload", v2(code, m) && obj(t, m["data"])["path"] == d+"/up.txt")
	code, m = e.upload("/v2/fs/upload", "home.txt", []byte("home"), "")
	step("v2 upload to the workspace", v2(code, m) && obj(t, m["data"])["path"] == viewRoot+"/home/home.txt")
	code, b, _ := e.do("DELETE", "/v2/fs/delete?path="+url.QueryEscape(d+"/up.txt"), "", nil)
	step("v2 delete", v2(code, decodeMap(t, b)))

	v1 := func(code int, m map[string]any) bool { return code == 200 && m["success"] == true }
	code, m = e.post("/v1/file/write", map[string]any{"file": d + "/v1.txt", "content": "gamma\n"})
	step("v1 write", v1(code, m))
	code, m = e.post("/v1/file/read", map[string]any{"file": d + "/v1.txt"})
	step("v1 read", v1(code, m) && obj(t, m["data"])["content"] == "gamma\n")
	code, m = e.post("/v1/file/list", map[string]any{"path": d, "recursive": true})
	step("v1 list", v1(code, m))
	code, body, _ = e.get("/v1/file/download", url.Values{"path": {d + "/v1.txt"}, "change_policy": {"abort"}})
	step("v1 download", code == 200 && string(body) == "gamma\n")
	code, m = e.upload("/v1/file/upload", "up1.txt", []byte("up1"), d)
	step("v1 upload", v1(code, m) && obj(t, m["data"])["file_path"] == d+"/up1.txt")
	code, m = e.post("/v1/file/replace", map[string]any{"file": d + "/v1.txt", "old_str": "gamma", "new_str": "delta"})
	step("v1 replace", v1(code, m) && num(t, obj(t, m["data"])["replaced_count"]) == 1)
	code, m = e.post("/v1/file/search", map[string]any{"file": d + "/v1.txt", "regex": "delta"})
	step("v1 search", v1(code, m) && len(list(t, obj(t, m["data"])["matches"])) == 1)
	code, m = e.post("/v1/file/find", map[string]any{"path": d, "glob": "*.txt"})
	step("v1 find", v1(code, m) && len(list(t, obj(t, m["data"])["files"])) == 4)
	code, m = e.post("/v1/file/grep", map[string]any{"path": d, "pattern": "delta|beta"})
	step("v1 grep", v1(code, m) && num(t, obj(t, m["data"])["match_count"]) == 2)
	code, m = e.post("/v1/file/glob", map[string]any{"path": viewRoot, "pattern": "**/*.txt"})
	step("v1 glob", v1(code, m) && num(t, obj(t, m["data"])["total_count"]) == 5)
	for _, c := range []map[string]any{
		{"command": "create", "path": d + "/ed.txt", "file_text": "a\n"},
		{"command": "str_replace", "path": d + "/ed.txt", "old_str": "a", "new_str": "b"},
		{"command": "insert", "path": d + "/ed.txt", "insert_line": 1, "new_str": "c"},
		{"command": "view", "path": d + "/ed.txt", "enable_metadata": true},
		{"command": "view", "path": d},
		{"command": "undo_edit", "path": d + "/ed.txt"},
	} {
		code, m = e.post("/v1/file/str_replace_editor", c)
		step("v1 editor "+c["command"].(string), v1(code, m))
	}
	if b, err := os.ReadFile(filepath.Join(fake.base, d, "ed.txt")); string(b) != "b\n" {
		t.Errorf("after the edits and one undo: %q %v", b, err)
	}

	files := NewFiles(Config{}).For(fake)
	if _, err := files.Write(d+"/mcp.txt", "m", "", false); err != nil {
		t.Errorf("Files.Write: %v", err)
	}
	if data, err := files.Read(d + "/mcp.txt"); err != nil || data["content"] != "m" {
		t.Errorf("Files.Read: %v %v", data, err)
	}
	if data, err := files.List(d); err != nil || len(data["files"].([]map[string]any)) != 6 {
		t.Errorf("Files.List: %v %v", data, err)
	}
	if len(fake.take()) == 0 {
		t.Errorf("Files did not go through the view")
	}
}

// TestRootIsCheckedInTheView: Config.Root applies to the view's paths,
// its links resolved there.
func TestRootIsCheckedInTheView(t *testing.T) {
	fake := &fakeFS{base: t.TempDir()}
	writeTestFile(t, filepath.Join(fake.base, viewRoot, "in", "a.txt"), "a")
	writeTestFile(t, filepath.Join(fake.base, viewRoot, "out", "b.txt"), "b")
	os.Symlink(viewRoot+"/out", filepath.Join(fake.base, viewRoot, "in", "link"))
	e := start(t, Config{Root: viewRoot + "/in", View: func(*fasthttp.RequestCtx) (FS, error) { return fake, nil }})
	code, m := e.getJSON("/v2/fs/read", url.Values{"path": {viewRoot + "/in/a.txt"}})
	okData(t, code, m)
	code, m = e.getJSON("/v2/fs/read", url.Values{"path": {viewRoot + "/in/link/b.txt"}})
	v2Fail(t, code, m, 403, "outside the allowed root")
	if calls := fake.take(); !strings.Contains(strings.Join(calls, "\n"), "Readlink "+viewRoot+"/in/link") {
		t.Errorf("the link was not read in the view: %v", calls)
	}
}

// uncomparableFS cannot be a map key, so it cannot key the undo history.
type uncomparableFS struct {
	*fakeFS
	_ []int
}

// TestViewFailureIs503: when the hook cannot give the caller's view,
// every route answers 503 naming why, and touches nothing.
func TestViewFailureIs503(t *testing.T) {
	for name, hook := range map[string]func(*fasthttp.RequestCtx) (FS, error){
		"helper is not running": func(*fasthttp.RequestCtx) (FS, error) {
			return nil, errors.New("tenant t1: the file helper is not running")
		},
		"returned no file system": func(*fasthttp.RequestCtx) (FS, error) { return nil, nil },
		"not comparable": func(*fasthttp.RequestCtx) (FS, error) {
			return uncomparableFS{fakeFS: &fakeFS{}}, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t, Config{View: hook})
			p := e.p("x.txt")
			writeTestFile(t, p, "x")
			want := func(route string, code int, m map[string]any) {
				t.Helper()
				if code != 503 || m["success"] != false || !strings.Contains(m["message"].(string), name) {
					t.Errorf("%s: %d %v", route, code, m)
				}
			}
			code, m := e.post("/v2/fs/write", map[string]any{"path": p, "content": "y"})
			want("v2 write", code, m)
			for _, route := range []string{"/v2/fs/read", "/v2/fs/list", "/v2/fs/download", "/v1/file/download"} {
				code, m := e.getJSON(route, url.Values{"path": {p}})
				want(route, code, m)
			}
			code, b, _ := e.do("DELETE", "/v2/fs/delete?path="+url.QueryEscape(p), "", nil)
			want("v2 delete", code, decodeMap(t, b))
			code, m = e.upload("/v2/fs/upload", "u.txt", []byte("u"), e.dir)
			want("v2 upload", code, m)
			code, m = e.upload("/v1/file/upload", "u.txt", []byte("u"), e.dir)
			want("v1 upload", code, m)
			for _, route := range []string{"read", "write", "list", "replace", "search", "find", "grep", "glob", "str_replace_editor"} {
				code, m := e.post("/v1/file/"+route, map[string]any{"file": p, "path": p, "content": "y",
					"old_str": "x", "new_str": "y", "regex": "x", "glob": "*", "pattern": "x", "command": "view"})
				want(route, code, m)
			}
			if b, _ := os.ReadFile(p); string(b) != "x" {
				t.Errorf("the file changed: %q", b)
			}
			if _, err := os.Stat(e.p("u.txt")); err == nil {
				t.Errorf("an upload landed")
			}
		})
	}
}

// TestUndoHistoryIsPerView: one path in two callers' views is two files;
// one caller's undo never restores the other's content.
func TestUndoHistoryIsPerView(t *testing.T) {
	a, b := &fakeFS{base: t.TempDir()}, &fakeFS{base: t.TempDir()}
	r := router.New()
	Register(r, Config{View: func(ctx *fasthttp.RequestCtx) (FS, error) {
		if string(ctx.Request.Header.Peek("X-Caller")) == "a" {
			return a, nil
		}
		return b, nil
	}})
	call := func(caller, body string) string {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/v1/file/str_replace_editor")
		ctx.Request.Header.Set("X-Caller", caller)
		ctx.Request.SetBody([]byte(body))
		r.Handler(&ctx)
		return string(ctx.Response.Body())
	}
	p := viewRoot + "/secret.txt"
	call("a", `{"command":"create","path":"`+p+`","file_text":"a's secret\n"}`)
	call("a", `{"command":"str_replace","path":"`+p+`","old_str":"secret","new_str":"note"}`)
	call("b", `{"command":"create","path":"`+p+`","file_text":"b's file\n"}`)
	if out := call("b", `{"command":"undo_edit","path":"`+p+`"}`); strings.Contains(out, "a's") {
		t.Fatalf("b's undo shows a's content: %s", out)
	}
	if _, err := os.Stat(filepath.Join(b.base, p)); !os.IsNotExist(err) {
		t.Errorf("b's undo should remove the file b created: %v", err)
	}
	if out := call("b", `{"command":"undo_edit","path":"`+p+`"}`); !strings.Contains(out, "No edit history") {
		t.Errorf("b has nothing more to undo: %s", out)
	}
	call("a", `{"command":"undo_edit","path":"`+p+`"}`)
	if got, _ := os.ReadFile(filepath.Join(a.base, p)); string(got) != "a's secret\n" {
		t.Errorf("a's undo: %q", got)
	}
}
