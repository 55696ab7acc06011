package fsplane

import (
	"os"
	"strings"
	"testing"
)

func TestV1ReplaceAndSearch(t *testing.T) {
	e := start(t, Config{})
	p := e.p("r.txt")
	writeTestFile(t, p, "foo bar\nbaz foo\nqux\n")
	code, m := e.post("/v1/file/replace", map[string]any{"file": p, "old_str": "foo", "new_str": "FOO", "sudo": true})
	d := okData(t, code, m)
	hasKeys(t, d, "file", "replaced_count")
	if num(t, d["replaced_count"]) != 2 {
		t.Fatalf("replace: %v", d)
	}
	if b, _ := os.ReadFile(p); string(b) != "FOO bar\nbaz FOO\nqux\n" {
		t.Fatalf("after replace: %q", b)
	}
	code, m = e.post("/v1/file/replace", map[string]any{"file": p, "old_str": "", "new_str": "x"})
	wantLoc(t, detail(t, code, m), "body", "old_str")

	code, m = e.post("/v1/file/search", map[string]any{"file": p, "regex": "^ba[rz]|qux"})
	d = okData(t, code, m)
	hasKeys(t, d, "file", "matches", "line_numbers")
	lines, nums := list(t, d["matches"]), list(t, d["line_numbers"])
	if len(lines) != 2 || lines[0] != "baz FOO" || lines[1] != "qux" || num(t, nums[0]) != 2 || num(t, nums[1]) != 3 {
		t.Fatalf("search: %v", d)
	}
	code, m = e.post("/v1/file/search", map[string]any{"file": p, "regex": "(?=look)"})
	wantLoc(t, detail(t, code, m), "body", "regex")
}

// findTree makes: a.py, notes.md, .git/x.py, pkg/b.py, pkg/sub/c.py, pkg/sub/c.txt.
func findTree(t *testing.T, e *env) {
	t.Helper()
	for _, f := range []string{"a.py", "notes.md", ".git/x.py", "pkg/b.py", "pkg/sub/c.py", "pkg/sub/c.txt"} {
		writeTestFile(t, e.p(strings.Split(f, "/")...), "x = 1\n")
	}
}

func strs(t *testing.T, v any) []string {
	t.Helper()
	var out []string
	for _, x := range list(t, v) {
		out = append(out, x.(string))
	}
	return out
}

func TestV1Find(t *testing.T) {
	e := start(t, Config{})
	findTree(t, e)
	code, m := e.post("/v1/file/find", map[string]any{"path": e.dir, "glob": "*.py"})
	d := okData(t, code, m)
	hasKeys(t, d, "path", "files")
	got := strs(t, d["files"])
	want := []string{e.p(".git", "x.py"), e.p("a.py"), e.p("pkg", "b.py"), e.p("pkg", "sub", "c.py")}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("find *.py = %v", got)
	}
	code, m = e.post("/v1/file/find", map[string]any{"path": e.dir, "glob": "pkg/**/*.{py,txt}"})
	if got := strs(t, okData(t, code, m)["files"]); len(got) != 3 {
		t.Fatalf("find with ** and braces = %v", got)
	}
	code, m = e.post("/v1/file/find", map[string]any{"path": e.dir, "glob": "[a-"})
	wantLoc(t, detail(t, code, m), "body", "glob")
}

func globPaths(t *testing.T, d map[string]any) []string {
	t.Helper()
	var out []string
	for _, f := range list(t, d["files"]) {
		out = append(out, obj(t, f)["path"].(string))
	}
	return out
}

func TestV1Glob(t *testing.T) {
	e := start(t, Config{})
	findTree(t, e)
	code, m := e.post("/v1/file/glob", map[string]any{"path": e.dir, "pattern": "*.py"})
	d := okData(t, code, m)
	hasKeys(t, d, "path", "pattern", "files", "total_count", "truncated")
	if got := globPaths(t, d); len(got) != 1 || got[0] != e.p("a.py") {
		t.Fatalf("*.py is the top level only: %v", got)
	}
	f := obj(t, list(t, d["files"])[0])
	hasKeys(t, f, "path", "name", "is_directory", "size", "modified_time")
	if f["name"] != "a.py" || num(t, f["size"]) != 6 || !isStr(f["modified_time"]) || f["is_directory"] != false {
		t.Errorf("entry = %v", f)
	}
	code, m = e.post("/v1/file/glob", map[string]any{"path": e.dir, "pattern": "**/*.py"})
	if got := globPaths(t, okData(t, code, m)); len(got) != 3 {
		t.Fatalf("**/*.py skips hidden: %v", got)
	}
	code, m = e.post("/v1/file/glob", map[string]any{"path": e.dir, "pattern": "**/*.py", "include_hidden": true, "exclude": []string{"sub"}})
	if got := globPaths(t, okData(t, code, m)); len(got) != 3 || got[0] != e.p(".git", "x.py") {
		t.Fatalf("include_hidden + exclude: %v", got)
	}
	code, m = e.post("/v1/file/glob", map[string]any{"path": e.dir, "pattern": "**", "files_only": false,
		"include_metadata": false, "max_results": 2, "sort_by": "name", "sort_desc": true})
	d = okData(t, code, m)
	if len(list(t, d["files"])) != 2 || d["truncated"] != true || num(t, d["total_count"]) != 7 {
		t.Fatalf("truncation: %v", d)
	}
	if f := obj(t, list(t, d["files"])[0]); f["name"] != "sub" || f["size"] != nil {
		t.Fatalf("desc by name without metadata: %v", f)
	}
	code, m = e.post("/v1/file/glob", map[string]any{"path": e.dir, "pattern": "/abs/*"})
	wantLoc(t, detail(t, code, m), "body", "pattern")
	code, m = e.post("/v1/file/glob", map[string]any{"path": e.dir, "pattern": "*", "max_results": 0})
	wantLoc(t, detail(t, code, m), "body", "max_results")
}

func TestV1Grep(t *testing.T) {
	e := start(t, Config{})
	writeTestFile(t, e.p("a.py"), "import os\ndef main():\n    return OS_NAME\n# end\n")
	writeTestFile(t, e.p("sub", "b.txt"), "nothing\nimport this\n")
	writeTestFile(t, e.p("bin.dat"), "import\x00binary")
	writeTestFile(t, e.p("big.txt"), "import "+strings.Repeat("x", 2048))
	writeTestFile(t, e.p(".hid", "h.txt"), "import hidden")

	code, m := e.post("/v1/file/grep", map[string]any{"path": e.dir, "pattern": "import", "max_file_size": "1K",
		"context_after": 1})
	d := okData(t, code, m)
	hasKeys(t, d, "path", "pattern", "matches", "match_count", "files_searched", "files_matched", "truncated")
	ms := list(t, d["matches"])
	if len(ms) != 2 || num(t, d["files_searched"]) != 2 || num(t, d["files_matched"]) != 2 || d["truncated"] != false {
		t.Fatalf("grep: %v", d)
	}
	first := obj(t, ms[0])
	hasKeys(t, first, "file", "line_number", "line_content", "context_before", "context_after")
	if first["file"] != e.p("a.py") || num(t, first["line_number"]) != 1 || first["line_content"] != "import os" ||
		strs(t, first["context_after"])[0] != "def main():" || len(list(t, first["context_before"])) != 0 {
		t.Errorf("first match: %v", first)
	}

	code, m = e.post("/v1/file/grep", map[string]any{"path": e.dir, "pattern": "os_name", "case_insensitive": true, "type": "py"})
	if ms := list(t, okData(t, code, m)["matches"]); len(ms) != 1 || num(t, obj(t, ms[0])["line_number"]) != 3 {
		t.Fatalf("case-insensitive: %v", ms)
	}
	code, m = e.post("/v1/file/grep", map[string]any{"path": e.dir, "pattern": "main()", "fixed_strings": true, "include": []string{"*.py"}})
	if ms := list(t, okData(t, code, m)["matches"]); len(ms) != 1 {
		t.Fatalf("fixed strings: %v", ms)
	}
	code, m = e.post("/v1/file/grep", map[string]any{"path": e.dir, "pattern": ".", "max_results": 2, "offset": 1, "recursive": false})
	d = okData(t, code, m)
	if ms := list(t, d["matches"]); len(ms) != 2 || d["truncated"] != true || num(t, obj(t, ms[0])["line_number"]) != 2 {
		t.Fatalf("max_results/offset: %v", d["matches"])
	}
	code, m = e.post("/v1/file/grep", map[string]any{"path": e.p("a.py"), "pattern": `main\(\):\n\s+return`, "multiline": true})
	if ms := list(t, okData(t, code, m)["matches"]); len(ms) != 1 || obj(t, ms[0])["line_content"] != "def main():\n    return OS_NAME" {
		t.Fatalf("multiline: %v", ms)
	}
	for field, v := range map[string]any{"context_before": 21, "max_results": 0, "max_file_size": "lots", "type": "cobol", "pattern": "("} {
		code, m = e.post("/v1/file/grep", map[string]any{"path": e.dir, "pattern": "x", field: v})
		wantLoc(t, detail(t, code, m), "body", field)
	}
}
