package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestV1Sandbox(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	r := ts.sdkOK(t, "GET", "v1/sandbox", nil)
	if _, ok := r.Body["data"].(string); !ok || r.Body["home_dir"] == "" || r.Body["version"] != Version {
		t.Fatalf("sandbox: %s", r.Raw)
	}
	sys := r.Body["detail"].(map[string]any)["system"].(map[string]any)
	u, _ := url.Parse(ts.URL)
	var found bool
	for _, p := range sys["occupied_ports"].([]any) {
		found = found || p == u.Port()
	}
	if !found {
		t.Fatalf("occupied_ports %v lacks the test server's port %s", sys["occupied_ports"], u.Port())
	}
	rt := r.Body["detail"].(map[string]any)["runtime"].(map[string]any)
	if len(rt["python"].([]any)) == 0 || len(rt["nodejs"].([]any)) == 0 {
		t.Fatalf("runtime: %v", rt)
	}

	py := ts.sdkOK(t, "GET", "v1/sandbox/packages/python", nil)
	if !strings.Contains(string(py.Raw), `"name":"ipykernel"`) {
		t.Fatalf("python packages lack ipykernel: %.300s", py.Raw)
	}
	js := ts.sdkOK(t, "GET", "v1/sandbox/packages/nodejs", nil)
	if !strings.Contains(string(js.Raw), `"name":"npm"`) {
		t.Fatalf("nodejs packages lack npm: %s", js.Raw)
	}
}

// TestV1FileShapes round-trips a few file-plane answers (package fsplane)
// through the same checker: results, FileOperationError, and 422.
func TestV1FileShapes(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	dir := t.TempDir()
	ts.sdkOK(t, "POST", "v1/file/write", map[string]any{"file": dir + "/a.txt", "content": "x\n", "encoding": nil, "append": nil})
	r := ts.sdkOK(t, "POST", "v1/file/read", map[string]any{"file": dir + "/a.txt"})
	if r.data()["content"] != "x\n" {
		t.Fatalf("read: %s", r.Raw)
	}
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"v1/file/read", map[string]any{"file": dir + "/missing.txt"}},
		{"v1/file/list", map[string]any{"path": dir + "/missing"}},
		{"v1/file/write", map[string]any{"file": dir + "/a.txt/b", "content": "y"}},
	} {
		r := ts.sdkOK(t, "POST", c.path, c.body)
		if r.Body["success"] != false || r.data()["error_type"] == nil {
			t.Fatalf("%s: want a FileOperationError: %s", c.path, r.Raw)
		}
	}
	ts.sdk422(t, "POST", "v1/file/read", map[string]any{"start_line": 1}, "body", "file")
}

// rawRequest sends exactly these bytes and returns the status and body.
func v1RawRequest(t *testing.T, ts *testServer, req string) (int, []byte) {
	t.Helper()
	u, _ := url.Parse(ts.URL)
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Minute))
	if _, err := io.WriteString(c, strings.ReplaceAll(req, "HOST", u.Host)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestV1EmptyBodies: the SDK's calls without arguments send no body, with
// Content-Length: 0 and content-type application/json (docs/v1-compat.md);
// every JSON route answers a JSON object, never 204 or an empty body.
func TestV1EmptyBodies(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	empty := func(method, path string) map[string]any {
		t.Helper()
		st, b := v1RawRequest(t, ts, method+" "+path+" HTTP/1.1\r\nHost: HOST\r\nX-Fern-Language: Python\r\n"+
			"content-type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		if st != 200 {
			t.Fatalf("%s %s with an empty body: %d %s", method, path, st, b)
		}
		return mustDoc(t, method, path, st, b)
	}
	c := empty("POST", "/v1/jupyter/sessions/create")
	sid := c["data"].(map[string]any)["session_id"].(string)
	n := empty("POST", "/v1/nodejs/sessions")
	nid := n["data"].(map[string]any)["session_id"].(string)
	empty("PATCH", "/v1/nodejs/sessions/"+nid)
	empty("GET", "/v1/nodejs/sessions/"+nid)
	empty("DELETE", "/v1/nodejs/sessions/"+nid)
	empty("DELETE", "/v1/jupyter/sessions/"+sid)
	empty("DELETE", "/v1/jupyter/sessions")
	empty("GET", "/v1/jupyter/sessions")
	empty("GET", "/v1/code/info")
	empty("GET", "/v1/jupyter/info")
	empty("GET", "/v1/nodejs/info")
	empty("GET", "/v1/nodejs/sessions")
	empty("GET", "/v1/sandbox")

	// A JSON null body is {} too.
	st, b := v1RawRequest(t, ts, "POST /v1/jupyter/sessions/create HTTP/1.1\r\nHost: HOST\r\ncontent-type: application/json\r\n"+
		"Content-Length: 4\r\nConnection: close\r\n\r\nnull")
	if st != 200 {
		t.Fatalf("null body: %d %s", st, b)
	}
	mustDoc(t, "POST", "/v1/jupyter/sessions/create", st, b)

	// Routes that need a field: an empty body is a 422 naming it.
	for path, field := range map[string]string{"/v1/code/execute": "language", "/v1/jupyter/execute": "code", "/v1/nodejs/execute": "code"} {
		st, b := v1RawRequest(t, ts, "POST "+path+" HTTP/1.1\r\nHost: HOST\r\ncontent-type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		v := mustDoc(t, "POST", path, st, b)
		loc := fmt.Sprint(v["detail"].([]any)[0].(map[string]any)["loc"])
		if st != 422 || loc != "[body "+field+"]" {
			t.Fatalf("%s empty: %d %s", path, st, b)
		}
	}
	// Malformed JSON and a non-object body: 422 in the same shape.
	for _, body := range []string{"{", "[1]", `"x"`} {
		st, b := v1RawRequest(t, ts, fmt.Sprintf("POST /v1/nodejs/execute HTTP/1.1\r\nHost: HOST\r\ncontent-type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body))
		if st != 422 {
			t.Fatalf("body %q: %d %s", body, st, b)
		}
		mustDoc(t, "POST", "/v1/nodejs/execute", st, b)
	}
}

// TestV1PythonClient runs examples/v1_sdk_walkthrough.py: the walkthrough
// and the SDK examples through httpx, built as the SDK builds its requests.
func TestV1PythonClient(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	dir := t.TempDir()
	cmd := exec.Command("/usr/bin/python3", "../examples/v1_sdk_walkthrough.py", ts.URL, dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("v1_sdk_walkthrough.py: %v\n%s", err, out)
	}
	text := string(out)
	if !strings.HasPrefix(text, "count     6.000000\nmean     57.500000\nstd      13.546217") {
		t.Fatalf("the walkthrough did not print the page's describe():\n%s", text)
	}
	for _, want := range []string{"[('plot.png', True), ('sales.csv', True)]", "6 6\n", "42\n42\n", "done\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if b, err := os.ReadFile(dir + "/margin.png"); err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
		t.Fatalf("margin.png is not a PNG (%v)", err)
	}
}
