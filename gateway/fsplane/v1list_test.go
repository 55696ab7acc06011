package fsplane

import (
	"os"
	"testing"
)

// listTree makes: a.txt (3 B), b.md (10 B), .hidden, sub/c.py, sub/deep/d.txt.
func listTree(t *testing.T, e *env) {
	t.Helper()
	writeTestFile(t, e.p("a.txt"), "abc")
	writeTestFile(t, e.p("b.md"), "0123456789")
	writeTestFile(t, e.p(".hidden"), "h")
	writeTestFile(t, e.p("sub", "c.py"), "print(1)\n")
	writeTestFile(t, e.p("sub", "deep", "d.txt"), "d")
	if err := os.Chmod(e.p("a.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, data map[string]any) []string {
	t.Helper()
	var out []string
	for _, f := range list(t, data["files"]) {
		out = append(out, obj(t, f)["name"].(string))
	}
	return out
}

func TestV1ListFields(t *testing.T) {
	e := start(t, Config{})
	listTree(t, e)
	code, m := e.post("/v1/file/list", map[string]any{"path": e.dir, "include_permissions": true})
	d := okData(t, code, m)
	hasKeys(t, d, "path", "files", "total_count", "directory_count", "file_count")
	if got := names(t, d); len(got) != 4 || got[0] != ".hidden" || got[1] != "a.txt" || got[3] != "sub" {
		t.Fatalf("names = %v (show_hidden defaults to true, sorted by name)", got)
	}
	if num(t, d["total_count"]) != 4 || num(t, d["directory_count"]) != 1 || num(t, d["file_count"]) != 3 {
		t.Errorf("counts: %v", d)
	}
	files := list(t, d["files"])
	a := obj(t, files[1])
	hasKeys(t, a, "name", "path", "is_directory", "size", "modified_time", "permissions", "extension")
	if a["path"] != e.p("a.txt") || a["is_directory"] != false || num(t, a["size"]) != 3 ||
		!isStr(a["modified_time"]) || a["extension"] != ".txt" || a["permissions"] != "-rw-r--r--" {
		t.Errorf("a.txt = %v", a)
	}
	if h := obj(t, files[0]); h["extension"] != "" {
		t.Errorf(".hidden extension = %v, want \"\"", h["extension"])
	}
	sub := obj(t, files[3])
	if sub["is_directory"] != true || sub["extension"] != "" || !isInt(sub["size"]) || sub["permissions"].(string)[0] != 'd' {
		t.Errorf("sub = %v", sub)
	}

	code, m = e.post("/v1/file/list", map[string]any{"path": e.dir})
	if _, ok := obj(t, list(t, okData(t, code, m)["files"])[0])["permissions"]; ok {
		t.Errorf("permissions sent without include_permissions")
	}
}

func TestV1ListOptions(t *testing.T) {
	e := start(t, Config{})
	listTree(t, e)
	code, m := e.post("/v1/file/list", map[string]any{"path": e.dir, "recursive": true, "show_hidden": false})
	d := okData(t, code, m)
	if num(t, d["total_count"]) != 6 || num(t, d["directory_count"]) != 2 {
		t.Fatalf("recursive: %v", names(t, d))
	}
	code, m = e.post("/v1/file/list", map[string]any{"path": e.dir, "recursive": true, "max_depth": 1})
	if got := names(t, okData(t, code, m)); len(got) != 4 {
		t.Fatalf("max_depth 1: %v", got)
	}
	code, m = e.post("/v1/file/list", map[string]any{"path": e.dir, "recursive": true, "file_types": []string{".txt", "py"}, "show_hidden": false})
	if got := names(t, okData(t, code, m)); len(got) != 5 { // a.txt c.py d.txt + sub + deep
		t.Fatalf("file_types: %v", got)
	}
	code, m = e.post("/v1/file/list", map[string]any{"path": e.dir, "sort_by": "size", "sort_desc": true, "show_hidden": false})
	if got := names(t, okData(t, code, m)); got[0] != "sub" && got[0] != "b.md" {
		t.Fatalf("size desc: %v", got)
	}
	code, m = e.post("/v1/file/list", map[string]any{"path": e.dir, "sort_by": "type", "show_hidden": false})
	if got := names(t, okData(t, code, m)); got[0] != "sub" || got[1] != "b.md" || got[2] != "a.txt" {
		t.Fatalf("type: %v (folders first, then by extension)", got)
	}
	code, m = e.post("/v1/file/list", map[string]any{"path": e.dir, "include_size": false})
	if f := obj(t, list(t, okData(t, code, m)["files"])[0]); f["size"] != nil {
		t.Fatalf("include_size false: %v", f)
	}
	code, m = e.post("/v1/file/list", map[string]any{"path": e.dir, "max_depth": 0})
	wantLoc(t, detail(t, code, m), "body", "max_depth")
	code, m = e.post("/v1/file/list", map[string]any{"path": e.p("nope")})
	fileOpError(t, code, m, "not_found")
}
