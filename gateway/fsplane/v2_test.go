package fsplane

import (
	"bytes"
	"encoding/base64"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pngBytes is a tiny valid PNG header plus bytes that are not UTF-8.
var pngBytes = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\xff\xfe")

const salesCSV = "month,revenue,cost\n2026-01,120,80\n2026-02,135,82\n2026-03,150,90\n" +
	"2026-04,142,95\n2026-05,168,99\n2026-06,180,104\n"

// TestV2Walkthrough runs the page's file-plane steps: write the CSV, write
// the chart (base64 stands in for savefig), list, download.
func TestV2Walkthrough(t *testing.T) {
	e := start(t, Config{})
	dir := e.p("analysis")
	code, m := e.post("/v2/fs/write", map[string]any{"path": dir + "/sales.csv", "content": salesCSV})
	d := okData(t, code, m)
	if m["message"] != "ok" || d["path"] != dir+"/sales.csv" || num(t, d["size"]) != int64(len(salesCSV)) {
		t.Fatalf("write answer: %v", m)
	}
	code, m = e.post("/v2/fs/write", map[string]any{
		"path": dir + "/plot.png", "content": base64.StdEncoding.EncodeToString(pngBytes), "encoding": "base64"})
	if num(t, okData(t, code, m)["size"]) != int64(len(pngBytes)) {
		t.Fatalf("base64 write size: %v", m)
	}

	code, m = e.getJSON("/v2/fs/list", url.Values{"path": {dir}})
	files := list(t, okData(t, code, m)["files"])
	if len(files) != 2 {
		t.Fatalf("want 2 files, got %v", files)
	}
	want := []struct {
		name string
		size int
	}{{"plot.png", len(pngBytes)}, {"sales.csv", len(salesCSV)}}
	for i, f := range files {
		fm := obj(t, f)
		hasKeys(t, fm, "name", "path", "size", "is_dir", "modified")
		if fm["name"] != want[i].name || num(t, fm["size"]) != int64(want[i].size) || fm["is_dir"] != false {
			t.Errorf("entry %d = %v, want %v", i, fm, want[i])
		}
		if _, err := time.Parse(time.RFC3339, fm["modified"].(string)); err != nil {
			t.Errorf("modified is not RFC 3339: %v", fm["modified"])
		}
	}

	code, body, h := e.get("/v2/fs/download", url.Values{"path": {dir + "/plot.png"}})
	if code != 200 || !bytes.Equal(body, pngBytes) {
		t.Fatalf("download: %d, %d bytes", code, len(body))
	}
	if cd := h.Get("Content-Disposition"); cd != `attachment; filename="plot.png"` {
		t.Errorf("Content-Disposition = %q", cd)
	}
	if ct := h.Get("Content-Type"); ct != "image/png" {
		t.Errorf("Content-Type = %q", ct)
	}
	if h.Get("Content-Length") != itoa(len(pngBytes)) {
		t.Errorf("Content-Length = %q", h.Get("Content-Length"))
	}
	_, body, _ = e.get("/v2/fs/download", url.Values{"path": {dir + "/sales.csv"}})
	if string(body) != salesCSV {
		t.Errorf("csv download = %q", body)
	}
}

func TestV2WriteAppendAndValidation(t *testing.T) {
	e := start(t, Config{})
	p := e.p("a", "b", "log.txt")
	e.post("/v2/fs/write", map[string]any{"path": p, "content": "one\n", "encoding": nil, "append": nil})
	code, m := e.post("/v2/fs/write", map[string]any{"path": p, "content": "two\n", "append": true})
	if d := okData(t, code, m); num(t, d["size"]) != 4 || d["created"] != false {
		t.Fatalf("append answer: %v", m)
	}
	if b, _ := os.ReadFile(p); string(b) != "one\ntwo\n" {
		t.Fatalf("after append: %q", b)
	}
	cases := []struct {
		name string
		body any
		want string
	}{
		{"empty body", "", "path"},
		{"missing content", map[string]any{"path": p}, "content"},
		{"null content", map[string]any{"path": p, "content": nil}, "content"},
		{"number content", map[string]any{"path": p, "content": 5}, "content"},
		{"bad base64", map[string]any{"path": p, "content": "@@not base64@@", "encoding": "base64"}, "content"},
		{"bad encoding", map[string]any{"path": p, "content": "x", "encoding": "utf-16"}, "encoding"},
		{"relative path", map[string]any{"path": "rel/x.txt", "content": "x"}, "path"},
		{"malformed JSON", `{"path": `, "JSON"},
		{"not an object", `[1,2]`, "object"},
		{"over a folder", map[string]any{"path": e.dir, "content": "x"}, "directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, m := e.post("/v2/fs/write", c.body)
			v2Fail(t, code, m, 422, c.want)
		})
	}
}

func TestV2ListFailures(t *testing.T) {
	e := start(t, Config{})
	code, m := e.getJSON("/v2/fs/list", url.Values{"path": {e.p("nope")}})
	v2Fail(t, code, m, 404, "no such file")
	writeTestFile(t, e.p("f.txt"), "x")
	code, m = e.getJSON("/v2/fs/list", url.Values{"path": {e.p("f.txt")}})
	v2Fail(t, code, m, 422, "not a directory")
	code, m = e.getJSON("/v2/fs/list", nil)
	v2Fail(t, code, m, 422, "path")
	os.Mkdir(e.p("empty"), 0o755)
	code, m = e.getJSON("/v2/fs/list", url.Values{"path": {e.p("empty")}})
	if files := list(t, okData(t, code, m)["files"]); len(files) != 0 {
		t.Fatalf("empty folder: %v", files)
	}
}

func TestV2Download(t *testing.T) {
	e := start(t, Config{})
	code, m := e.getJSON("/v2/fs/download", url.Values{"path": {e.p("missing.png")}})
	v2Fail(t, code, m, 404, "missing.png")
	code, m = e.getJSON("/v2/fs/download", url.Values{"path": {e.dir}})
	v2Fail(t, code, m, 422, "is a directory")

	name := e.p(`résumé "v2".bin`)
	writeTestFile(t, name, "data")
	code, body, h := e.get("/v2/fs/download", url.Values{"path": {name}})
	if code != 200 || string(body) != "data" {
		t.Fatalf("download: %d %q", code, body)
	}
	want := `attachment; filename="r_sum_ \"v2\".bin"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22v2%22.bin`
	if cd := h.Get("Content-Disposition"); cd != want {
		t.Errorf("Content-Disposition = %q\nwant %q", cd, want)
	}
	if ct := h.Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
}

func TestV2ReadGetAndPost(t *testing.T) {
	e := start(t, Config{})
	writeTestFile(t, e.p("t.txt"), "héllo\n")
	writeTestFile(t, e.p("b.bin"), string(pngBytes))
	code, m := e.getJSON("/v2/fs/read", url.Values{"path": {e.p("t.txt")}})
	d := okData(t, code, m)
	if d["content"] != "héllo\n" || d["encoding"] != "utf-8" || d["path"] != e.p("t.txt") {
		t.Fatalf("read text: %v", d)
	}
	code, m = e.post("/v2/fs/read", map[string]any{"path": e.p("b.bin")})
	d = okData(t, code, m)
	if d["encoding"] != "base64" || d["content"] != base64.StdEncoding.EncodeToString(pngBytes) {
		t.Fatalf("read binary: %v", d)
	}
	code, m = e.post("/v2/fs/read", map[string]any{"path": e.p("nope")})
	v2Fail(t, code, m, 404, "nope")
	code, m = e.post("/v2/fs/read", `{}`)
	v2Fail(t, code, m, 422, "path")
}

func TestV2UploadAndDelete(t *testing.T) {
	e := start(t, Config{})
	code, m := e.upload("/v2/fs/upload", "data.csv", []byte(salesCSV), e.p("up")+"/")
	d := okData(t, code, m)
	if d["path"] != e.p("up", "data.csv") || num(t, d["size"]) != int64(len(salesCSV)) {
		t.Fatalf("upload: %v", d)
	}
	code, m = e.upload("/v2/fs/upload", "x.bin", pngBytes, e.p("up", "renamed.bin"))
	if okData(t, code, m)["path"] != e.p("up", "renamed.bin") {
		t.Fatalf("upload to a file path: %v", m)
	}
	code, b, _ := e.do("DELETE", "/v2/fs/delete?path="+url.QueryEscape(e.p("up")), "", nil)
	v2Fail(t, code, decodeMap(t, b), 422, "recursive")
	code, b, _ = e.do("DELETE", "/v2/fs/delete?recursive=true&path="+url.QueryEscape(e.p("up")), "", nil)
	okData(t, code, decodeMap(t, b))
	if _, err := os.Stat(e.p("up")); !os.IsNotExist(err) {
		t.Fatalf("folder still there: %v", err)
	}
	code, b, _ = e.do("DELETE", "/v2/fs/delete?path="+url.QueryEscape(e.p("up")), "", nil)
	v2Fail(t, code, decodeMap(t, b), 404, "no such file")
}

// TestV2Root: with Root set, paths outside it (also through a symlink) are 403.
func TestV2Root(t *testing.T) {
	outside := t.TempDir()
	writeTestFile(t, filepath.Join(outside, "secret.txt"), "s")
	root := t.TempDir()
	e := start(t, Config{Root: root})
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	code, m := e.getJSON("/v2/fs/download", url.Values{"path": {filepath.Join(outside, "secret.txt")}})
	v2Fail(t, code, m, 403, "outside the allowed root")
	code, m = e.post("/v2/fs/write", map[string]any{"path": filepath.Join(root, "link", "new.txt"), "content": "x"})
	v2Fail(t, code, m, 403, "outside the allowed root")
	code, m = e.post("/v2/fs/write", map[string]any{"path": filepath.Join(root, "in", "ok.txt"), "content": "x"})
	okData(t, code, m)
}
