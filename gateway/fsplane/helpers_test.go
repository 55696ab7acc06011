package fsplane

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
)

// env is one file plane served over loopback for one test.
type env struct {
	t    *testing.T
	base string // http://127.0.0.1:port
	dir  string // scratch folder for the test's files
	c    *http.Client
}

// start serves Register(cfg) on a random loopback port until the test ends.
func start(t *testing.T, cfg Config) *env {
	t.Helper()
	r := router.New()
	Register(r, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &fasthttp.Server{Handler: r.Handler, MaxRequestBodySize: 8 << 20}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = srv.Shutdown()
		<-done
	})
	return &env{t: t, base: "http://" + ln.Addr().String(), dir: t.TempDir(), c: &http.Client{Transport: tr}}
}

// p joins names under the test's scratch folder.
func (e *env) p(names ...string) string { return filepath.Join(append([]string{e.dir}, names...)...) }

// do sends one request and returns the status, body and headers.
func (e *env) do(method, path, ctype string, body []byte) (int, []byte, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatalf("new request: %v", err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := e.c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("read body of %s %s: %v", method, path, err)
	}
	checkAnswer(e.t, req, resp, b)
	return resp.StatusCode, b, resp.Header
}

// post sends v as JSON (a string or []byte is sent as is) and decodes the answer.
func (e *env) post(path string, v any) (int, map[string]any) {
	e.t.Helper()
	var body []byte
	switch x := v.(type) {
	case string:
		body = []byte(x)
	case []byte:
		body = x
	default:
		body, _ = json.Marshal(v)
	}
	code, b, _ := e.do("POST", path, "application/json", body)
	return code, decodeMap(e.t, b)
}

// get sends a GET with query values and returns the raw answer.
func (e *env) get(path string, q url.Values) (int, []byte, http.Header) {
	e.t.Helper()
	if q != nil {
		path += "?" + q.Encode()
	}
	return e.do("GET", path, "", nil)
}

// getJSON is get with the answer decoded.
func (e *env) getJSON(path string, q url.Values) (int, map[string]any) {
	e.t.Helper()
	code, b, _ := e.get(path, q)
	return code, decodeMap(e.t, b)
}

// upload sends a multipart body with a "file" part and, when path is not
// empty, a "path" part.
func (e *env) upload(route, filename string, content []byte, path string) (int, map[string]any) {
	e.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", filename)
	_, _ = fw.Write(content)
	if path != "" {
		_ = mw.WriteField("path", path)
	}
	_ = mw.Close()
	code, b, _ := e.do("POST", route, mw.FormDataContentType(), buf.Bytes())
	return code, decodeMap(e.t, b)
}

// decodeMap decodes a JSON object, keeping numbers as written.
func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("answer is not a JSON object: %v: %q", err, b)
	}
	return m
}

// writeFile makes a test file, creating folders.
func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func obj(t *testing.T, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("want an object, got %T %v", v, v)
	}
	return m
}

func list(t *testing.T, v any) []any {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("want a list, got %T %v", v, v)
	}
	return l
}

// isInt reports a JSON number written without fraction or exponent.
func isInt(v any) bool {
	n, ok := v.(json.Number)
	return ok && !strings.ContainsAny(n.String(), ".eE")
}

func num(t *testing.T, v any) int64 {
	t.Helper()
	if !isInt(v) {
		t.Fatalf("want an integer, got %T %v", v, v)
	}
	n, _ := v.(json.Number).Int64()
	return n
}

func isStr(v any) bool  { _, ok := v.(string); return ok }
func isBool(v any) bool { _, ok := v.(bool); return ok }

// hasKeys fails unless m has every key.
func hasKeys(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("missing key %q in %v", k, m)
		}
	}
}

// okData checks a 200 success envelope and returns data.
func okData(t *testing.T, code int, m map[string]any) map[string]any {
	t.Helper()
	if code != 200 || m["success"] != true {
		t.Fatalf("want 200 success, got %d %v", code, m)
	}
	hasKeys(t, m, "success", "message", "data")
	return obj(t, m["data"])
}

// fileOpError checks a v1 handled failure and returns its FileOperationError.
func fileOpError(t *testing.T, code int, m map[string]any, kind string) map[string]any {
	t.Helper()
	if code != 200 || m["success"] != false {
		t.Fatalf("want 200 with success false, got %d %v", code, m)
	}
	d := obj(t, m["data"])
	hasKeys(t, d, "path", "operation", "message", "error_type", "retryable", "errno", "errno_name", "exception_type")
	if d["error_type"] != kind {
		t.Fatalf("error_type = %v, want %s (%v)", d["error_type"], kind, d)
	}
	for _, k := range []string{"path", "operation", "message", "exception_type"} {
		if !isStr(d[k]) || d[k] == "" {
			t.Errorf("%s should be a non-empty string: %v", k, d)
		}
	}
	if !isBool(d["retryable"]) {
		t.Errorf("retryable should be a bool: %v", d)
	}
	if m["message"] == "" {
		t.Errorf("envelope message is empty")
	}
	return d
}

// detail checks a FastAPI 422 and returns its only entry.
func detail(t *testing.T, code int, m map[string]any) map[string]any {
	t.Helper()
	if code != 422 {
		t.Fatalf("want 422, got %d %v", code, m)
	}
	l := list(t, m["detail"])
	if len(l) != 1 {
		t.Fatalf("want one detail entry, got %v", l)
	}
	d := obj(t, l[0])
	if !isStr(d["msg"]) || !isStr(d["type"]) {
		t.Fatalf("msg and type must be strings: %v", d)
	}
	return d
}

// wantLoc checks a detail entry's loc.
func wantLoc(t *testing.T, d map[string]any, loc ...string) {
	t.Helper()
	l := list(t, d["loc"])
	if len(l) != len(loc) {
		t.Fatalf("loc = %v, want %v", l, loc)
	}
	for i := range loc {
		if l[i] != loc[i] {
			t.Fatalf("loc = %v, want %v", l, loc)
		}
	}
}

// v2Fail checks a v2 failure envelope: status, success false, data null, and
// a message holding want.
func v2Fail(t *testing.T, code int, m map[string]any, status int, want string) {
	t.Helper()
	if code != status || m["success"] != false || m["data"] != nil {
		t.Fatalf("want %d with success false and data null, got %d %v", status, code, m)
	}
	msg, _ := m["message"].(string)
	if !strings.Contains(msg, want) {
		t.Fatalf("message %q should mention %q", msg, want)
	}
}
