package gateway

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aiod/aiod/stream/execution"
	"github.com/aiod/aiod/web"
)

// webGet fetches path with optional request headers, returning the response
// and its body.
func (ts *testServer) webGet(t *testing.T, method, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestWebPageHeaders(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	resp, body := ts.webGet(t, "GET", "/")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /: %d %s", resp.StatusCode, body)
	}
	want := map[string]string{
		"Content-Type":            "text/html; charset=utf-8",
		"Cache-Control":           "no-cache",
		"X-Content-Type-Options":  "nosniff",
		"X-Frame-Options":         "DENY",
		"Referrer-Policy":         "no-referrer",
		"Content-Security-Policy": webCSP,
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("GET / %s = %q, want %q", k, got, v)
		}
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'self'", "script-src 'self';", "img-src 'self' data: blob:", "connect-src 'self';", "frame-ancestors 'none'", "object-src 'none'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("CSP lacks %q: %s", d, csp)
		}
	}
	if strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "script-src 'self' 'unsafe-inline'") || strings.Contains(csp, "*") {
		t.Errorf("CSP is too loose: %s", csp)
	}
	if !strings.Contains(body, `<script defer src="static/app.js"></script>`) {
		t.Errorf("GET / does not load static/app.js:\n%s", body)
	}

	etag := resp.Header.Get("ETag")
	if etag == "" {
		t.Fatal("GET / has no ETag")
	}
	if r, _ := ts.webGet(t, "GET", "/", "If-None-Match", etag); r.StatusCode != http.StatusNotModified {
		t.Errorf("GET / with If-None-Match: %d, want 304", r.StatusCode)
	}
	if r, b := ts.webGet(t, "HEAD", "/"); r.StatusCode != 200 || b != "" || r.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("HEAD /: %d, %q, %q", r.StatusCode, r.Header.Get("Content-Type"), b)
	}
}

func TestWebAssets(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	const js = "text/javascript; charset=utf-8"
	types := map[string]string{
		"app.js": js, "outputs.js": js, "ansi.js": js, "markup.js": js, "notebook.js": js, "editor.js": js,
		"vendor/codemirror.js": js, "vendor/markdown.js": js, "vendor/LICENSES.txt": "text/plain; charset=utf-8",
		"app.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml",
	}
	for name, ctype := range types {
		resp, body := ts.webGet(t, "GET", "/static/"+name)
		want, _ := fs.ReadFile(web.FS(), name)
		if resp.StatusCode != 200 || body != string(want) {
			t.Errorf("GET /static/%s: %d, %d bytes, want %d", name, resp.StatusCode, len(body), len(want))
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != ctype {
			t.Errorf("GET /static/%s: Content-Type %q, want %q", name, got, ctype)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET /static/%s: headers %v", name, resp.Header)
		}
		if r, _ := ts.webGet(t, "GET", "/static/"+name, "If-None-Match", `W/"x", `+resp.Header.Get("ETag")); r.StatusCode != http.StatusNotModified {
			t.Errorf("GET /static/%s with its ETag: %d, want 304", name, r.StatusCode)
		}
	}
	for _, p := range []string{"/static/nope.js", "/static/index.html", "/static/", "/index.html"} {
		st, env := ts.call(t, "GET", p, nil)
		if st != 404 || env["success"] != false {
			t.Errorf("GET %s: %d %v, want a 404 envelope", p, st, env)
		}
	}
}

// TestWebGzip: text assets go gzipped to a client that accepts it, with
// their own ETag; others get them as they are.
func TestWebGzip(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	want, _ := fs.ReadFile(web.FS(), "vendor/codemirror.js")
	plain, body := ts.webGet(t, "GET", "/static/vendor/codemirror.js", "Accept-Encoding", "identity")
	if plain.Header.Get("Content-Encoding") != "" || body != string(want) || plain.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("identity: %q, %d bytes, Vary %q", plain.Header.Get("Content-Encoding"), len(body), plain.Header.Get("Vary"))
	}
	gz, zbody := ts.webGet(t, "GET", "/static/vendor/codemirror.js", "Accept-Encoding", "gzip, deflate, br")
	if gz.Header.Get("Content-Encoding") != "gzip" || gz.Header.Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Fatalf("gzip: %v", gz.Header)
	}
	zr, err := gzip.NewReader(strings.NewReader(zbody))
	if err != nil {
		t.Fatal(err)
	}
	un, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(un, want) {
		t.Fatalf("the gzipped body does not inflate to the file: %v, %d bytes", err, len(un))
	}
	if len(zbody)*2 > len(want) {
		t.Errorf("gzip saves little: %d of %d bytes", len(zbody), len(want))
	}
	t.Logf("vendor/codemirror.js: %d bytes, %d gzipped", len(want), len(zbody))
	if gz.Header.Get("ETag") == plain.Header.Get("ETag") || gz.Header.Get("ETag") == "" {
		t.Errorf("ETags: gzip %q, identity %q", gz.Header.Get("ETag"), plain.Header.Get("ETag"))
	}
	if r, _ := ts.webGet(t, "GET", "/static/vendor/codemirror.js", "Accept-Encoding", "gzip", "If-None-Match", gz.Header.Get("ETag")); r.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match with the gzip ETag: %d", r.StatusCode)
	}
	if r, _ := ts.webGet(t, "GET", "/static/favicon.svg", "Accept-Encoding", "gzip"); r.Header.Get("Content-Encoding") != "" && len(want) < 300 {
		t.Errorf("a tiny file is gzipped")
	}
}

// TestWebANSICases: the page's ANSI converter (web/static/ansi.js) and the
// daemon's StripANSI agree on what an escape sequence is; both are tested
// on web/testdata/ansi.json (the page's side in web/jstest/ansi.test.js).
func TestWebANSICases(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "web", "testdata", "ansi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			Name  string `json:"name"`
			In    string `json:"in"`
			Plain string `json:"plain"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Cases) < 10 {
		t.Fatalf("web/testdata/ansi.json: %v, %d cases", err, len(doc.Cases))
	}
	for _, c := range doc.Cases {
		if got := execution.StripANSI(c.In); got != c.Plain {
			t.Errorf("%s: StripANSI(%q) = %q, want %q", c.Name, c.In, got, c.Plain)
		}
	}
}

// TestWebToken: with a token, the page needs it too, and passes it on to
// the assets it loads.
func TestWebToken(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Token: "t0k&<"})
	if r, _ := ts.webGet(t, "GET", "/"); r.StatusCode != 401 {
		t.Errorf("GET / without the token: %d, want 401", r.StatusCode)
	}
	resp, body := ts.webGet(t, "GET", "/?token=t0k%26%3C")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /?token=: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("a page that holds the token must not be stored: Cache-Control %q", resp.Header.Get("Cache-Control"))
	}
	refs := regexp.MustCompile(`(?:src|href)="(static/[^"]+)"`).FindAllStringSubmatch(body, -1)
	if len(refs) < 4 {
		t.Fatalf("asset references: %v", refs)
	}
	for _, m := range refs {
		if !strings.HasSuffix(m[1], "?token=t0k%26%3C") {
			t.Errorf("asset %s does not carry the token", m[1])
			continue
		}
		if r, _ := ts.webGet(t, "GET", "/"+m[1]); r.StatusCode != 200 {
			t.Errorf("GET /%s: %d", m[1], r.StatusCode)
		}
	}
	if r, _ := ts.webGet(t, "GET", "/", "Authorization", "Bearer t0k&<"); r.StatusCode != 200 || r.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("GET / with a Bearer token: %d %q", r.StatusCode, r.Header.Get("Cache-Control"))
	}
}

// TestWebNoMarkupFromData keeps the page's isolation rules checkable
// without a browser: no inline script or handler the CSP would have to
// allow, and no API that parses strings as markup or code.
func TestWebNoMarkupFromData(t *testing.T) {
	t.Parallel()
	err := fs.WalkDir(web.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasPrefix(p, "vendor/") {
			return nil // the bundled libraries: checked by web.TestVendorBundleIsCurrent
		}
		b, _ := fs.ReadFile(web.FS(), p)
		s := string(b)
		switch {
		case strings.HasSuffix(p, ".html"):
			if m := regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]|\son[a-z]+=|\sstyle=|javascript:`).FindString(s); m != "" {
				t.Errorf("%s: inline code or style %q", p, m)
			}
			if m := regexp.MustCompile(`(?:src|href)="(?:https?:)?//`).FindString(s); m != "" {
				t.Errorf("%s: loads from outside the daemon: %q", p, m)
			}
		case strings.HasSuffix(p, ".js"):
			for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "allow-scripts", "allow-same-origin", "http://", "https://"} {
				if strings.Contains(s, bad) {
					t.Errorf("%s uses %s", p, bad)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
