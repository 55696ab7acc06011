package gateway

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// registerSkill posts the SDK's multipart register_skills as ts's caller.
func (ts *testServer) registerSkill(t *testing.T, fields map[string]string, zipped []byte) (int, map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	if zipped != nil {
		w, _ := mw.CreateFormFile("file", "skills.zip")
		_, _ = w.Write(zipped)
	}
	_ = mw.Close()
	req, _ := http.NewRequest("POST", ts.URL+"/v1/skills/register", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+ts.token)
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// zipOf makes a zip of name -> content; a name ending in "*" is
// executable, one starting with "@" a link to its content.
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range files {
		h := &zip.FileHeader{Name: strings.TrimSuffix(strings.TrimPrefix(name, "@"), "*"), Method: zip.Deflate}
		switch {
		case strings.HasSuffix(name, "*"):
			h.SetMode(0o755)
		case strings.HasPrefix(name, "@"):
			h.SetMode(fs.ModeSymlink | 0o777)
		default:
			h.SetMode(0o644)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(content))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestV1Skills: the SDK's skills client (issue 42): a folder the caller's
// code wrote registers with its front matter's name and metadata; a zip
// extracts through the caller's view (a script stays executable) and
// registers its skills; zip slip and links are refused; content comes
// without the front matter; another tenant sees none of it; delete and
// clear unregister.
func TestV1Skills(t *testing.T) {
	t.Parallel()
	_, alice, bob := twoTenants(t)

	md := "---\nname: report-writer\ndescription: Create structured reports.\ntags: [docs, writing]\n---\n# Report Writer\n\nUse it for reports.\n"
	if st, env, _ := alice.exec(t, map[string]any{"language": "python", "code": "import os\nos.makedirs('/tmp/skills/rw', exist_ok=True)\nopen('/tmp/skills/rw/SKILL.md', 'w').write(" + jsonString(md) + ")"}); st != 200 || env["success"] != true {
		t.Fatalf("write the skill: %d %v", st, env)
	}
	st, env := alice.registerSkill(t, map[string]string{"path": "/tmp/skills/rw"}, nil)
	data, _ := env["data"].(map[string]any)
	reg, _ := data["registered"].([]any)
	if st != 200 || data["count"] != 1.0 || len(reg) != 1 {
		t.Fatalf("register a folder: %d %v", st, env)
	}
	if s := reg[0].(map[string]any); s["name"] != "report-writer" || s["path"] != "/tmp/skills/rw" ||
		s["metadata"].(map[string]any)["description"] != "Create structured reports." || len(s["metadata"].(map[string]any)["tags"].([]any)) != 2 {
		t.Fatalf("registered: %v", s)
	}

	z := zipOf(t, map[string]string{"helper/SKILL.md": "---\nname: zip-helper\ndescription: from a zip\n---\nRun scripts/run.sh.\n", "helper/scripts/run.sh*": "#!/bin/sh\necho ran\n"})
	st, env = alice.registerSkill(t, map[string]string{"path": "/tmp/zipped"}, z)
	if data, _ := env["data"].(map[string]any); st != 200 || data["count"] != 1.0 {
		t.Fatalf("register a zip: %d %v", st, env)
	}
	if _, _, d := alice.exec(t, map[string]any{"language": "bash", "code": "/tmp/zipped/helper/scripts/run.sh"}); d["stdout"] != "ran\n" {
		t.Fatalf("the zip's script: %v", d)
	}
	for what, files := range map[string]map[string]string{
		"zip slip": {"../evil/SKILL.md": "x"},
		"a link":   {"l/SKILL.md": "x", "@l/passwd": "/etc/passwd"},
	} {
		if st, env := alice.registerSkill(t, map[string]string{"path": "/tmp/bad"}, zipOf(t, files)); st != 422 {
			t.Errorf("%s: %d %v, want 422", what, st, env)
		}
	}
	if st, env := alice.registerSkill(t, map[string]string{}, nil); st != 422 || !strings.Contains(mustJSONString(t, env), "path") {
		t.Errorf("no path: %d %v", st, env)
	}

	if l := alice.sdkOK(t, "GET", "v1/skills/metadatas", nil); len(l.data()["skills"].([]any)) != 2 {
		t.Fatalf("alice's skills: %s", l.Raw)
	}
	if l := alice.sdkOK(t, "GET", "v1/skills/metadatas?names=zip-helper", nil); len(l.data()["skills"].([]any)) != 1 {
		t.Fatalf("names=zip-helper: %s", l.Raw)
	}
	if c := alice.sdkOK(t, "GET", "v1/skills/report-writer/content", nil); c.data()["content"] != "# Report Writer\n\nUse it for reports.\n" {
		t.Fatalf("content: %s", c.Raw)
	}
	if l := bob.sdkOK(t, "GET", "v1/skills/metadatas", nil); len(l.data()["skills"].([]any)) != 0 {
		t.Fatalf("bob sees alice's skills: %s", l.Raw)
	}
	bob.sdkStatus(t, "GET", "v1/skills/report-writer/content", nil, http.StatusNotFound)
	bob.sdkStatus(t, "DELETE", "v1/skills/report-writer", nil, http.StatusNotFound)

	alice.sdkOK(t, "DELETE", "v1/skills/report-writer", nil)
	alice.sdkStatus(t, "GET", "v1/skills/report-writer/content", nil, http.StatusNotFound)
	if c := alice.sdkOK(t, "DELETE", "v1/skills", nil); c.data()["cleared"] != 1.0 {
		t.Fatalf("clear: %s", c.Raw)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
