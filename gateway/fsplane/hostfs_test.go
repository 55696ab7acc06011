package fsplane

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// linkFolders is a working folder with links in it and a folder outside.
type linkFolders struct {
	ws, outside string
}

// newLinkFolders makes ws/sub/a.txt ("inside") and outside/secret.txt
// ("outside"), and in ws: links leading out (host to /etc/hostname, out to
// the secret, outdir to the outside folder, rel the same by "..",
// dangling to a missing file outside) and links staying in (in, absolute;
// inrel, relative; indir to ws/sub; back, which goes out by ".." and comes
// back in).
func newLinkFolders(t *testing.T) linkFolders {
	t.Helper()
	base := t.TempDir()
	lf := linkFolders{ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	writeTestFile(t, filepath.Join(lf.outside, "secret.txt"), "outside\n")
	writeTestFile(t, filepath.Join(lf.ws, "sub", "a.txt"), "inside\n")
	for name, target := range map[string]string{
		"host":     "/etc/hostname",
		"out":      filepath.Join(lf.outside, "secret.txt"),
		"outdir":   lf.outside,
		"rel":      "../outside/secret.txt",
		"dangling": filepath.Join(lf.outside, "new.txt"),
		"in":       filepath.Join(lf.ws, "sub", "a.txt"),
		"inrel":    "sub/a.txt",
		"indir":    filepath.Join(lf.ws, "sub"),
		"back":     "../ws/sub",
	} {
		if err := os.Symlink(target, filepath.Join(lf.ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	return lf
}

func (lf linkFolders) w(names ...string) string {
	return filepath.Join(append([]string{lf.ws}, names...)...)
}

// checkOutsideUntouched fails when anything outside changed.
func (lf linkFolders) checkOutsideUntouched(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(lf.outside, "secret.txt")); err != nil || string(b) != "outside\n" {
		t.Errorf("outside/secret.txt changed: %q %v", b, err)
	}
	des, _ := os.ReadDir(lf.outside)
	if len(des) != 1 {
		t.Errorf("outside holds %d entries, want only secret.txt: %v", len(des), des)
	}
}

const leaves = "through a symbolic link; aiod does not follow links out of it"

// TestWorkspaceLinksOutAreRefused: below the working folder no route
// follows a link out of it, for reading, writing, uploading, listing,
// deleting or walking; the v2 answer is 403, the v1 answer
// permission_denied, both naming the folder.
func TestWorkspaceLinksOutAreRefused(t *testing.T) {
	lf := newLinkFolders(t)
	e := start(t, Config{Workspace: lf.ws})
	wantV2 := func(t *testing.T, code int, m map[string]any) {
		t.Helper()
		v2Fail(t, code, m, 403, "leaves the working folder "+lf.ws+" "+leaves)
	}
	wantV1 := func(t *testing.T, code int, m map[string]any) {
		t.Helper()
		d := fileOpError(t, code, m, kindPermission)
		if !strings.Contains(d["message"].(string), leaves) {
			t.Errorf("message: %v", d["message"])
		}
	}
	for _, name := range []string{"host", "out", "rel", "outdir/secret.txt", "dangling"} {
		t.Run("read "+name, func(t *testing.T) {
			code, m := e.getJSON("/v2/fs/read", url.Values{"path": {lf.w(name)}})
			if name == "dangling" {
				wantV2(t, code, m) // not 404: where it leads is not the caller's to learn
				return
			}
			wantV2(t, code, m)
			code, m = e.getJSON("/v2/fs/download", url.Values{"path": {lf.w(name)}})
			wantV2(t, code, m)
			code, m = e.post("/v1/file/read", map[string]any{"file": lf.w(name)})
			wantV1(t, code, m)
			code, m = e.getJSON("/v1/file/download", url.Values{"path": {lf.w(name)}})
			if code != 403 || obj(t, m["data"])["error_type"] != kindPermission {
				t.Errorf("v1 download: %d %v", code, m)
			}
		})
	}
	for _, name := range []string{"out", "rel", "dangling", "outdir/new.txt", "outdir/deeper/new.txt"} {
		t.Run("write "+name, func(t *testing.T) {
			code, m := e.post("/v2/fs/write", map[string]any{"path": lf.w(name), "content": "pwned"})
			wantV2(t, code, m)
			code, m = e.post("/v1/file/write", map[string]any{"file": lf.w(name), "content": "pwned", "append": true})
			wantV1(t, code, m)
			code, m = e.upload("/v2/fs/upload", "x.txt", []byte("pwned"), lf.w(name))
			wantV2(t, code, m)
			code, m = e.upload("/v1/file/upload", "x.txt", []byte("pwned"), lf.w(name))
			wantV1(t, code, m)
		})
	}
	t.Run("upload into outdir", func(t *testing.T) {
		code, m := e.upload("/v2/fs/upload", "x.txt", []byte("pwned"), lf.w("outdir")+"/")
		wantV2(t, code, m)
		code, m = e.upload("/v1/file/upload", "x.txt", []byte("pwned"), lf.w("outdir"))
		wantV1(t, code, m)
	})
	t.Run("edit", func(t *testing.T) {
		code, m := e.post("/v1/file/replace", map[string]any{"file": lf.w("out"), "old_str": "outside", "new_str": "pwned"})
		wantV1(t, code, m)
		code, m = e.post("/v1/file/search", map[string]any{"file": lf.w("out"), "regex": "."})
		wantV1(t, code, m)
		for _, c := range []map[string]any{
			{"command": "view", "path": lf.w("out")},
			{"command": "view", "path": lf.w("outdir")},
			{"command": "str_replace", "path": lf.w("out"), "old_str": "outside", "new_str": "pwned"},
			{"command": "insert", "path": lf.w("rel"), "insert_line": 0, "new_str": "pwned"},
			{"command": "create", "path": lf.w("outdir", "created.txt"), "file_text": "pwned"},
		} {
			code, m := e.post("/v1/file/str_replace_editor", c)
			wantV1(t, code, m)
		}
	})
	t.Run("list and walk", func(t *testing.T) {
		code, m := e.getJSON("/v2/fs/list", url.Values{"path": {lf.w("outdir")}})
		wantV2(t, code, m)
		for route, pattern := range map[string]string{"/v1/file/list": "", "/v1/file/find": "*",
			"/v1/file/grep": "o", "/v1/file/glob": "*"} {
			code, m := e.post(route, map[string]any{"path": lf.w("outdir"), "glob": pattern, "pattern": pattern})
			wantV1(t, code, m)
			code, m = e.post(route, map[string]any{"path": lf.w("out"), "glob": pattern, "pattern": pattern})
			wantV1(t, code, m)
		}
	})
	t.Run("delete", func(t *testing.T) {
		code, b, _ := e.do("DELETE", "/v2/fs/delete?path="+url.QueryEscape(lf.w("outdir", "secret.txt")), "", nil)
		wantV2(t, code, decodeMap(t, b))
		code, b, _ = e.do("DELETE", "/v2/fs/delete?recursive=true&path="+url.QueryEscape(lf.w("outdir", "secret.txt")), "", nil)
		wantV2(t, code, decodeMap(t, b))
	})
	t.Run("files", func(t *testing.T) {
		f := NewFiles(Config{Workspace: lf.ws})
		if _, err := f.Read(lf.w("out")); err == nil || err.(*Error).Status != 403 || !strings.Contains(err.Error(), leaves) {
			t.Errorf("Files.Read: %v", err)
		}
		if _, err := f.Write(lf.w("outdir", "f.txt"), "pwned", "", false); err == nil || err.(*Error).Status != 403 {
			t.Errorf("Files.Write: %v", err)
		}
		if _, err := f.List(lf.w("outdir")); err == nil || err.(*Error).Status != 403 {
			t.Errorf("Files.List: %v", err)
		}
	})
	lf.checkOutsideUntouched(t)
}

// TestWorkspaceLinksInsideWork: links that stay in the working folder,
// absolute or relative, are followed; the folder holding links out is
// listed and walked (the links are entries, not followed); a link out is
// deleted as itself; paths outside the working folder follow links as
// before.
func TestWorkspaceLinksInsideWork(t *testing.T) {
	lf := newLinkFolders(t)
	e := start(t, Config{Workspace: lf.ws})
	for _, name := range []string{"in", "inrel", "indir/a.txt", "back/a.txt"} {
		code, m := e.getJSON("/v2/fs/read", url.Values{"path": {lf.w(name)}})
		if d := okData(t, code, m); d["content"] != "inside\n" {
			t.Errorf("read %s: %v", name, d)
		}
	}
	code, m := e.post("/v2/fs/write", map[string]any{"path": lf.w("in"), "content": "through in\n"})
	okData(t, code, m)
	code, m = e.post("/v1/file/write", map[string]any{"file": lf.w("indir", "b.txt"), "content": "b\n"})
	okData(t, code, m)
	code, m = e.upload("/v2/fs/upload", "c.txt", []byte("c\n"), lf.w("back")+"/")
	okData(t, code, m)
	for name, want := range map[string]string{"a.txt": "through in\n", "b.txt": "b\n", "c.txt": "c\n"} {
		if b, err := os.ReadFile(lf.w("sub", name)); err != nil || string(b) != want {
			t.Errorf("sub/%s = %q %v, want %q", name, b, err, want)
		}
	}
	code, m = e.post("/v1/file/str_replace_editor", map[string]any{"command": "str_replace", "path": lf.w("inrel"), "old_str": "through", "new_str": "via"})
	okData(t, code, m)

	code, m = e.getJSON("/v2/fs/list", url.Values{"path": {lf.w()}})
	names := map[string]bool{}
	for _, f := range list(t, okData(t, code, m)["files"]) {
		names[obj(t, f)["name"].(string)] = true
	}
	for _, n := range []string{"host", "out", "outdir", "dangling", "sub"} {
		if !names[n] {
			t.Errorf("list of the working folder lacks %s: %v", n, names)
		}
	}
	code, m = e.post("/v1/file/list", map[string]any{"path": lf.w(), "recursive": true})
	okData(t, code, m)
	code, m = e.post("/v1/file/glob", map[string]any{"path": lf.w(), "pattern": "**/*.txt"})
	if d := okData(t, code, m); num(t, d["total_count"]) != 3 {
		t.Errorf("glob: %v", d)
	}
	code, m = e.post("/v1/file/grep", map[string]any{"path": lf.w(), "pattern": "via"})
	if d := okData(t, code, m); num(t, d["match_count"]) != 1 {
		t.Errorf("grep: %v", d)
	}

	code, b, _ := e.do("DELETE", "/v2/fs/delete?path="+url.QueryEscape(lf.w("out")), "", nil)
	okData(t, code, decodeMap(t, b))
	code, b, _ = e.do("DELETE", "/v2/fs/delete?recursive=true&path="+url.QueryEscape(lf.w("outdir")), "", nil)
	okData(t, code, decodeMap(t, b))
	if _, err := os.Lstat(lf.w("out")); !os.IsNotExist(err) {
		t.Errorf("the link should be gone: %v", err)
	}
	lf.checkOutsideUntouched(t)

	// Outside the working folder links are followed as before.
	elsewhere := t.TempDir()
	os.Symlink("/etc/hostname", filepath.Join(elsewhere, "host"))
	code, m = e.getJSON("/v2/fs/read", url.Values{"path": {filepath.Join(elsewhere, "host")}})
	okData(t, code, m)
}

// TestWorkspaceMissingIsCreated: a working folder that does not exist yet
// is created by the first write into it, as before.
func TestWorkspaceMissingIsCreated(t *testing.T) {
	ws := filepath.Join(t.TempDir(), "not", "yet")
	e := start(t, Config{Workspace: ws})
	code, m := e.getJSON("/v2/fs/read", url.Values{"path": {filepath.Join(ws, "a.txt")}})
	v2Fail(t, code, m, 404, "no such file")
	code, m = e.upload("/v2/fs/upload", "a.txt", []byte("a"), "")
	if d := okData(t, code, m); d["path"] != filepath.Join(ws, "a.txt") {
		t.Fatalf("upload: %v", d)
	}
}

// TestFilesOnlyThroughFS: no code of the plane touches a file by name
// (package fsys does): every access goes through the FS picked for the
// request.
func TestFilesOnlyThroughFS(t *testing.T) {
	banned := map[string]map[string]bool{
		"os": set("Open", "OpenFile", "Create", "Stat", "Lstat", "ReadDir", "ReadFile", "WriteFile",
			"Mkdir", "MkdirAll", "MkdirTemp", "CreateTemp", "Remove", "RemoveAll", "Rename", "Readlink",
			"Symlink", "Link", "Chmod", "Chown", "Lchown", "Chtimes", "Truncate", "OpenRoot", "OpenInRoot",
			"DirFS", "CopyFS", "Chdir", "SameFile"),
		"filepath": set("Walk", "WalkDir", "EvalSymlinks", "Glob"),
		"ioutil":   set("ReadFile", "WriteFile", "ReadDir", "TempFile", "TempDir"),
		"syscall": set("Open", "Openat", "Stat", "Lstat", "Statfs", "Unlink", "Unlinkat", "Rmdir", "Mkdir",
			"Mkdirat", "Mkfifo", "Mknod", "Rename", "Renameat", "Readlink", "Symlink", "Link", "Access",
			"Faccessat", "Chmod", "Chown", "Truncate", "Creat", "Utimes", "Getdents"),
	}
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("glob: %v %v", files, err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		imports := map[string]string{} // local name -> import path's last element
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			local := filepath.Base(p)
			if im.Name != nil {
				local = im.Name.Name
			}
			imports[local] = filepath.Base(p)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			id, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			if pkg, ok := imports[id.Name]; ok && banned[pkg][sel.Sel.Name] {
				t.Errorf("%s: %s.%s touches files by name; go through the request's FS", fset.Position(sel.Pos()), id.Name, sel.Sel.Name)
			}
			return true
		})
	}
}

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}
