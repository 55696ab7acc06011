package gateway

import (
	"bytes"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/gateway/openapi"
	"github.com/aiod/aiod/gateway/openapi/openapitest"
)

// openapiDoc is the document every handler test validates answers with.
func openapiDoc(t testing.TB) *openapitest.Doc {
	t.Helper()
	d, err := openapitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOpenAPIHasEveryRoute walks the router and fails on any route the
// document does not describe (and on documented routes that are gone).
func TestOpenAPIHasEveryRoute(t *testing.T) {
	t.Parallel()
	d := openapiDoc(t)
	srv, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(t.Context())
	var missing []string
	routed := map[string]bool{}
	n := 0
	for method, paths := range srv.routes().List() {
		for _, p := range paths {
			n++
			doc := p
			if strings.HasPrefix(p, "/static/") {
				doc = "/static/{asset}" // one route per embedded file
			}
			routed[strings.ToLower(method)+" "+doc] = true
			if !d.Has(method, doc) {
				missing = append(missing, method+" "+p)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%d of %d routes are not in gateway/openapi/openapi.json:\n  %s", len(missing), n, strings.Join(missing, "\n  "))
	}
	var stale []string
	for path, pi := range d.T.Paths.Map() {
		for method := range pi.Operations() {
			if !routed[strings.ToLower(method)+" "+path] {
				stale = append(stale, method+" "+path)
			}
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("openapi.json describes routes the router does not have:\n  %s", strings.Join(stale, "\n  "))
	}
	if d.T.Info.Version != Version || openapi.DocVersion != Version {
		t.Errorf("openapi.json says version %q (DocVersion %q), the binary is %q", d.T.Info.Version, openapi.DocVersion, Version)
	}
	if d.T.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", d.T.OpenAPI)
	}
}

// TestOpenAPIAndDocsServed fetches the document and the page without
// credentials from a gateway that requires them.
func TestOpenAPIAndDocsServed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Token: "s3cret"})
	for _, c := range []struct{ path, ctype, want string }{
		{"/openapi.json", "application/json", `"openapi": "3.1.0"`},
		{"/docs", "text/html", `<script src="/docs/docs.js"`},
		{"/docs/docs.js", "text/javascript", "openapi.json"},
		{"/docs/docs.css", "text/css", "{"},
	} {
		resp, err := ts.client.Get(ts.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b := readAllClose(t, resp)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) || !strings.Contains(string(b), c.want) {
			t.Fatalf("GET %s: %d %s, want 200 %s containing %q: %.200s", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.ctype, c.want, b)
		}
		if c.path != "/openapi.json" && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Fatalf("GET %s: CSP %q", c.path, resp.Header.Get("Content-Security-Policy"))
		}
	}
	if st, _ := ts.callRaw(t, "GET", "/v2/code/info"); st != http.StatusUnauthorized {
		t.Fatalf("/v2/code/info without the token: %d, want 401", st)
	}
}

func readAllClose(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkAnswer validates one answer of a handler test against openapi.json:
// the shared HTTP helpers (call, exec, callRaw, sdk, ...) call it, so every
// answer they see is checked. A mismatch fails the test without stopping it.
func checkAnswer(t testing.TB, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	if err := openapiDoc(t).Check(req, resp.StatusCode, resp.Header, body); err != nil {
		t.Errorf("%v\nbody: %.600s", err, body)
	}
}

// mustDoc decodes raw and fails the test unless openapi.json allows it as
// method path's answer with status.
func mustDoc(t testing.TB, method, path string, status int, raw []byte) map[string]any {
	t.Helper()
	if err := openapiDoc(t).CheckBody(method, path, status, raw); err != nil {
		t.Fatalf("%v\nbody: %s", err, raw)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s %s: body is not a JSON object (%v): %q", method, path, err, raw)
	}
	return v
}

// TestOpenAPIRejectsWrongAnswers: the validator the helpers use does judge
// v2 answers (a missing field, a value outside an enum, a wrong status, an
// error envelope that claims success, a route's unknown status).
func TestOpenAPIRejectsWrongAnswers(t *testing.T) {
	t.Parallel()
	d := openapiDoc(t)
	const ok = `{"success":true,"message":"ok","data":{"code":"1","language":"python","status":"ok","execution_count":1,"exit_code":0,"outputs":[{"output_type":"stream","name":"stdout","text":"1\n"}],"stdout":"1\n","stderr":"","session_id":null,"execution_id":"0b6f2f4e-6d1c-4b7a-9a44-2a1f9e0c3d11"}}`
	if err := d.CheckBody("POST", "/v2/code/execute", 200, []byte(ok)); err != nil {
		t.Fatalf("a good answer is rejected: %v", err)
	}
	for name, c := range map[string]struct {
		status         int
		from, to, path string
	}{
		"stdout missing":                   {200, `"stdout":"1\n",`, ``, "/v2/code/execute"},
		"status not in enum":               {200, `"status":"ok"`, `"status":"fine"`, "/v2/code/execute"},
		"outputs null":                     {200, `"outputs":[{"output_type":"stream","name":"stdout","text":"1\n"}]`, `"outputs":null`, "/v2/code/execute"},
		"output without type":              {200, `"output_type":"stream",`, ``, "/v2/code/execute"},
		"422 with data":                    {422, `"success":true`, `"success":false`, "/v2/code/execute"},
		"unknown path 404 not an envelope": {404, ok, `{"detail":"x"}`, "/v2/nope"},
	} {
		bad := strings.Replace(ok, c.from, c.to, 1)
		if bad == ok {
			t.Fatalf("%s: %q not found", name, c.from)
		}
		if err := d.CheckBody("POST", c.path, c.status, []byte(bad)); err == nil {
			t.Errorf("%s: accepted %s", name, bad)
		}
	}
	if err := d.CheckBody("GET", "/v2/nope", 404, []byte(`{"success":false,"message":"no route GET /v2/nope","data":null}`)); err != nil {
		t.Errorf("the router's 404 envelope is rejected: %v", err)
	}
	if err := d.CheckBody("GET", "/healthz", 201, []byte(`{"success":true,"message":"ok","data":{"status":"ok"}}`)); err == nil {
		t.Errorf("an undocumented status of /healthz (which has no default) is accepted")
	}
}

// TestV1Aliases: /v1/openapi.json, /v1/docs and /v1/mcp, the agent_sandbox
// reference's names, answer as /openapi.json, /docs and /mcp do (issue 42).
func TestV1Aliases(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Token: "s3cret"})
	for alias, orig := range map[string]string{"/v1/openapi.json": "/openapi.json", "/v1/docs": "/docs"} {
		var bodies [2][]byte
		var types [2]string
		for i, p := range []string{orig, alias} {
			resp, err := ts.client.Get(ts.URL + p)
			if err != nil {
				t.Fatal(err)
			}
			bodies[i], types[i] = readAllClose(t, resp), resp.Header.Get("Content-Type")
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s: %d", p, resp.StatusCode)
			}
		}
		if !bytes.Equal(bodies[0], bodies[1]) || types[0] != types[1] || len(bodies[0]) == 0 {
			t.Errorf("GET %s (%s, %d bytes) differs from GET %s (%s, %d bytes)", alias, types[1], len(bodies[1]), orig, types[0], len(bodies[0]))
		}
	}
	cs := mcpClientAt(t, ts, "/v1/mcp", "s3cret", nil)
	res := callTool(t, cs, "execute_code", map[string]any{"language": "python", "code": "print(6 * 7)"}, nil)
	if !strings.Contains(texts(res), "42") {
		t.Errorf("execute_code through /v1/mcp: %s", texts(res))
	}
}
