package fsplane

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// editorOK checks a successful editor answer and the model's required keys.
func editorOK(t *testing.T, code int, m map[string]any) map[string]any {
	t.Helper()
	d := okData(t, code, m)
	hasKeys(t, d, "output", "error", "path", "prev_exist", "old_content", "new_content", "metadata")
	if !isStr(d["output"]) || !isStr(d["path"]) || !isBool(d["prev_exist"]) || d["error"] != nil {
		t.Fatalf("editor result types: %v", d)
	}
	return d
}

// editorRefused checks a refused edit: success false, the result model with
// error set.
func editorRefused(t *testing.T, code int, m map[string]any, want string) {
	t.Helper()
	if code != 200 || m["success"] != false {
		t.Fatalf("want a refused edit, got %d %v", code, m)
	}
	d := obj(t, m["data"])
	hasKeys(t, d, "output", "path", "prev_exist")
	if msg, _ := d["error"].(string); !strings.Contains(msg, want) {
		t.Fatalf("error %q should mention %q", msg, want)
	}
}

func TestV1EditorFlow(t *testing.T) {
	e := start(t, Config{})
	p := e.p("src", "app.py")
	ed := func(body map[string]any) (int, map[string]any) {
		body["path"] = p
		return e.post("/v1/file/str_replace_editor", body)
	}
	code, m := ed(map[string]any{"command": "create", "file_text": "a = 1\nb = 2\na = 1\n"})
	if d := editorOK(t, code, m); d["prev_exist"] != false || d["new_content"] != "a = 1\nb = 2\na = 1\n" {
		t.Fatalf("create: %v", d)
	}
	code, m = ed(map[string]any{"command": "view"})
	if out := editorOK(t, code, m)["output"].(string); !strings.Contains(out, "     1\ta = 1\n     2\tb = 2\n     3\ta = 1\n") {
		t.Fatalf("view: %q", out)
	}
	code, m = ed(map[string]any{"command": "view", "view_range": []int{2, -1}})
	if out := editorOK(t, code, m)["output"].(string); !strings.HasSuffix(out, "     2\tb = 2\n     3\ta = 1\n") {
		t.Fatalf("view_range: %q", out)
	}
	code, m = ed(map[string]any{"command": "view", "view_range": []int{5, 9}})
	editorRefused(t, code, m, "view_range")

	code, m = ed(map[string]any{"command": "str_replace", "old_str": "a = 1", "new_str": "a = 3"})
	editorRefused(t, code, m, "Multiple occurrences")
	code, m = ed(map[string]any{"command": "str_replace", "old_str": "zzz", "new_str": "y"})
	editorRefused(t, code, m, "did not appear verbatim")
	code, m = ed(map[string]any{"command": "str_replace", "old_str": "a = 1", "new_str": "a = 3", "replace_mode": "LAST"})
	if d := editorOK(t, code, m); d["new_content"] != "a = 1\nb = 2\na = 3\n" || d["old_content"] != "a = 1\nb = 2\na = 1\n" {
		t.Fatalf("LAST: %v", d)
	}
	code, m = ed(map[string]any{"command": "str_replace", "old_str": "b = 2", "new_str": "b = 4"})
	editorOK(t, code, m)
	code, m = ed(map[string]any{"command": "insert", "insert_line": 0, "new_str": "import os"})
	if d := editorOK(t, code, m); d["new_content"] != "import os\na = 1\nb = 4\na = 3\n" {
		t.Fatalf("insert: %v", d)
	}
	code, m = ed(map[string]any{"command": "insert", "insert_line": 99, "new_str": "x"})
	editorRefused(t, code, m, "insert_line")

	for _, want := range []string{"a = 1\nb = 4\na = 3\n", "a = 1\nb = 2\na = 3\n", "a = 1\nb = 2\na = 1\n"} {
		code, m = ed(map[string]any{"command": "undo_edit"})
		editorOK(t, code, m)
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Fatalf("undo: %q, want %q", b, want)
		}
	}
	code, m = ed(map[string]any{"command": "undo_edit"}) // undoes the create
	editorOK(t, code, m)
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("undoing create should remove the file: %v", err)
	}
	code, m = ed(map[string]any{"command": "undo_edit"})
	editorRefused(t, code, m, "No edit history")
}

func TestV1EditorFailures(t *testing.T) {
	e := start(t, Config{})
	writeTestFile(t, e.p("d", "x.txt"), "x\n")
	writeTestFile(t, e.p("d", ".secret"), "s\n")
	code, m := e.post("/v1/file/str_replace_editor", map[string]any{"command": "view", "path": e.p("d"), "enable_metadata": true})
	d := editorOK(t, code, m)
	if out := d["output"].(string); !strings.Contains(out, e.p("d", "x.txt")) || strings.Contains(out, ".secret") {
		t.Fatalf("view folder: %q", out)
	}
	if obj(t, d["metadata"])["is_directory"] != true {
		t.Fatalf("metadata: %v", d["metadata"])
	}
	code, m = e.post("/v1/file/str_replace_editor", map[string]any{"command": "view", "path": e.p("nope")})
	fileOpError(t, code, m, "not_found")
	code, m = e.post("/v1/file/str_replace_editor", map[string]any{"command": "create", "path": e.p("d")})
	wantLoc(t, detail(t, code, m), "body", "file_text")
	code, m = e.post("/v1/file/str_replace_editor", map[string]any{"command": "create", "path": e.p("d"), "file_text": "x"})
	fileOpError(t, code, m, "invalid_target")
	code, m = e.post("/v1/file/str_replace_editor", map[string]any{"command": "delete", "path": e.p("d")})
	wantLoc(t, detail(t, code, m), "body", "command")
	code, m = e.post("/v1/file/str_replace_editor", map[string]any{"command": "str_replace", "path": e.p("d", "x.txt"), "old_str": "x", "replace_mode": "SOME"})
	wantLoc(t, detail(t, code, m), "body", "replace_mode")
	code, m = e.post("/v1/file/str_replace_editor", map[string]any{"path": e.p("d")})
	wantLoc(t, detail(t, code, m), "body", "command")
}

// TestConcurrentEdits runs editor commands and writes on many files at once
// (for -race): each file ends with every insert applied exactly once.
func TestConcurrentEdits(t *testing.T) {
	e := start(t, Config{})
	const files, edits = 8, 10
	var wg sync.WaitGroup
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := e.p(fmt.Sprintf("f%d.txt", i))
			e.post("/v1/file/str_replace_editor", map[string]any{"command": "create", "path": p, "file_text": ""})
			for j := range edits {
				e.post("/v1/file/str_replace_editor", map[string]any{"command": "insert", "path": p, "insert_line": j, "new_str": fmt.Sprint(j)})
				e.post("/v1/file/read", map[string]any{"file": p})
			}
		}()
	}
	wg.Wait()
	for i := range files {
		b, _ := os.ReadFile(e.p(fmt.Sprintf("f%d.txt", i)))
		if strings.Count(string(b), "\n") != edits {
			t.Errorf("f%d: %q", i, b)
		}
	}
}
