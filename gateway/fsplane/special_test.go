package fsplane

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// specialFiles returns targets that are no regular file, each with the
// words its refusal must hold: a kernel pseudo-file that fails to read,
// two devices, a FIFO (no writer: opening it for reading would block) and
// a Unix socket.
func specialFiles(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return map[string]string{
		"/proc/self/mem": "kernel pseudo-file (proc) that cannot be read",
		"/dev/zero":      "is a character device, not a regular file",
		"/dev/null":      "is a character device, not a regular file",
		fifo:             "is a named pipe (FIFO), not a regular file",
		sock:             "is a Unix socket, not a regular file",
	}
}

// TestSpecialFilesAreRefused: reading, downloading, searching or editing a
// target that is no regular file answers 422 (v2) or invalid_target (v1;
// 400 on its download) naming what it is, at once: nothing blocks, nothing
// is a 500.
func TestSpecialFilesAreRefused(t *testing.T) {
	e := start(t, Config{})
	e.c.Timeout = 10 * time.Second // a FIFO that blocks fails here, not at the test's deadline
	files := NewFiles(Config{})
	for path, want := range specialFiles(t) {
		t.Run(path, func(t *testing.T) {
			for _, q := range []url.Values{
				{"path": {path}},
				{"path": {path}, "start_line": {"1"}, "end_line": {"2"}},
			} {
				code, m := e.getJSON("/v2/fs/read", q)
				v2Fail(t, code, m, 422, want)
			}
			code, m := e.post("/v2/fs/read", map[string]any{"path": path, "start_line": 3})
			v2Fail(t, code, m, 422, want)
			code, m = e.getJSON("/v2/fs/download", url.Values{"path": {path}})
			v2Fail(t, code, m, 422, want)

			wantV1 := func(code int, m map[string]any) {
				t.Helper()
				d := fileOpError(t, code, m, kindTarget)
				if !strings.Contains(d["message"].(string), want) {
					t.Errorf("message %q should hold %q", d["message"], want)
				}
			}
			code, m = e.post("/v1/file/read", map[string]any{"file": path})
			wantV1(code, m)
			code, m = e.post("/v1/file/read", map[string]any{"file": path, "start_line": 0, "end_line": 1})
			wantV1(code, m)
			code, m = e.post("/v1/file/search", map[string]any{"file": path, "regex": "x"})
			wantV1(code, m)
			code, m = e.post("/v1/file/replace", map[string]any{"file": path, "old_str": "x", "new_str": "y"})
			wantV1(code, m)
			code, m = e.post("/v1/file/grep", map[string]any{"path": path, "pattern": "x"})
			wantV1(code, m)
			for _, c := range []map[string]any{
				{"command": "view", "path": path},
				{"command": "str_replace", "path": path, "old_str": "x", "new_str": "y"},
				{"command": "insert", "path": path, "insert_line": 0, "new_str": "y"},
			} {
				code, m = e.post("/v1/file/str_replace_editor", c)
				wantV1(code, m)
			}
			code, m = e.getJSON("/v1/file/download", url.Values{"path": {path}})
			if code != 400 || !strings.Contains(obj(t, m["data"])["message"].(string), want) {
				t.Errorf("v1 download: %d %v", code, m)
			}
			if _, err := files.Read(path); err == nil || err.(*Error).Status != 422 || !strings.Contains(err.Error(), want) {
				t.Errorf("Files.Read: %v", err)
			}
		})
	}
}

// TestSpecialFilesAreNotWritten: a write or upload onto a device, FIFO or
// socket is refused the same way (writing a FIFO nobody reads would block).
func TestSpecialFilesAreNotWritten(t *testing.T) {
	e := start(t, Config{})
	e.c.Timeout = 10 * time.Second
	for path, want := range specialFiles(t) {
		if strings.HasPrefix(path, "/proc/") {
			continue // a regular file as far as stat goes; writing it is the kernel's to refuse
		}
		t.Run(path, func(t *testing.T) {
			code, m := e.post("/v2/fs/write", map[string]any{"path": path, "content": "x"})
			v2Fail(t, code, m, 422, want)
			code, m = e.upload("/v2/fs/upload", "x", []byte("x"), path)
			v2Fail(t, code, m, 422, want)
			code, m = e.post("/v1/file/write", map[string]any{"file": path, "content": "x", "append": true})
			if d := fileOpError(t, code, m, kindTarget); !strings.Contains(d["message"].(string), want) {
				t.Errorf("v1 write: %v", d)
			}
			code, m = e.upload("/v1/file/upload", "x", []byte("x"), path)
			fileOpError(t, code, m, kindTarget)
		})
	}
}

// TestProcTextFilesAreRead: a pseudo-file that reads as text
// (/proc/self/status, size 0 per stat) is read, downloaded and searched
// whole.
func TestProcTextFilesAreRead(t *testing.T) {
	e := start(t, Config{})
	const p = "/proc/self/status"
	code, m := e.getJSON("/v2/fs/read", url.Values{"path": {p}})
	if d := okData(t, code, m); !strings.HasPrefix(d["content"].(string), "Name:") {
		t.Errorf("read: %v", d)
	}
	code, m = e.getJSON("/v2/fs/read", url.Values{"path": {p}, "start_line": {"1"}, "end_line": {"1"}})
	if d := okData(t, code, m); !strings.HasPrefix(d["content"].(string), "Name:") || num(t, d["line_count"]) != 1 {
		t.Errorf("read a line: %v", d)
	}
	code, body, h := e.get("/v2/fs/download", url.Values{"path": {p}})
	if code != 200 || !strings.Contains(string(body), "\nPid:") || h.Get("Content-Length") != itoa(len(body)) {
		t.Errorf("download: %d %q %v", code, body, h)
	}
	code, m = e.post("/v1/file/search", map[string]any{"file": p, "regex": "^Pid:"})
	if d := okData(t, code, m); len(list(t, d["matches"])) != 1 {
		t.Errorf("search: %v", d)
	}
	code, m = e.post("/v1/file/grep", map[string]any{"path": p, "pattern": "^Pid:"})
	if d := okData(t, code, m); num(t, d["match_count"]) != 1 {
		t.Errorf("grep: %v", d)
	}
}

// TestGrepSkipsSpecialFilesInATree: a walk passes FIFOs and sockets by,
// as ripgrep does, instead of failing or blocking on them.
func TestGrepSkipsSpecialFilesInATree(t *testing.T) {
	e := start(t, Config{})
	e.c.Timeout = 10 * time.Second
	if err := syscall.Mkfifo(e.p("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, e.p("a.txt"), "needle\n")
	code, m := e.post("/v1/file/grep", map[string]any{"path": e.dir, "pattern": "needle"})
	if d := okData(t, code, m); num(t, d["match_count"]) != 1 {
		t.Errorf("grep: %v", d)
	}
	code, m = e.post("/v1/file/find", map[string]any{"path": e.dir, "glob": "*"})
	if d := okData(t, code, m); len(list(t, d["files"])) != 2 {
		t.Errorf("find: %v", d)
	}
	if _, err := os.Stat(e.p("fifo")); err != nil {
		t.Fatal(err)
	}
}
