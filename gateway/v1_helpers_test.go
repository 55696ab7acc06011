package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// v1Reply is one answer to a request sent as the agent_sandbox SDK sends it.
type v1Reply struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any // nil when the body is not a JSON object
}

// data is the envelope's data as an object (nil when it is not one).
func (r v1Reply) data() map[string]any {
	d, _ := r.Body["data"].(map[string]any)
	return d
}

// sdk sends a request the way the SDK's httpx client does (docs/v1-compat.md): the
// URL is base + "/" + a relative "v1/..." path; every request carries
// X-Fern-Language: Python and content-type: application/json; a JSON body
// holds only the arguments given (nil values are sent as null); no body at
// all is sent with Content-Length: 0. With ts.token set, the request
// carries it as a bearer token (the SDK's headers= argument).
func (ts *testServer) sdk(t testing.TB, method, rel string, body map[string]any) v1Reply {
	t.Helper()
	if strings.HasPrefix(rel, "/") {
		t.Fatalf("sdk paths are relative, as the SDK builds them: %q", rel)
	}
	var rd io.Reader = http.NoBody
	n := int64(0)
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd, n = strings.NewReader(string(b)), int64(len(b))
	}
	req, err := http.NewRequest(method, ts.URL+"/"+rel, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = n
	// With no body, net/http sends Content-Length: 0 on POST and PATCH, as
	// httpx does (TestV1EmptyBodies checks what arrives).
	req.Header.Set("X-Fern-Language", "Python")
	req.Header.Set("content-type", "application/json")
	req.Header.Set("User-Agent", "python-httpx/0.28.1")
	req.Header.Set("Accept", "*/*")
	if ts.token != "" {
		req.Header.Set("Authorization", "Bearer "+ts.token)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rel, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := v1Reply{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.Body)
	checkAnswer(t, req, resp, raw)
	return r
}

// sdkOK sends a request and wants 200 (sdk has checked the body against
// the route's schema in openapi.json, written from the SDK's models).
func (ts *testServer) sdkOK(t testing.TB, method, rel string, body map[string]any) v1Reply {
	t.Helper()
	return ts.sdkStatus(t, method, rel, body, http.StatusOK)
}

// sdkStatus sends a request and wants the status (and, as every sdk call,
// a body openapi.json allows for it).
func (ts *testServer) sdkStatus(t testing.TB, method, rel string, body map[string]any, status int) v1Reply {
	t.Helper()
	r := ts.sdk(t, method, rel, body)
	if r.Status != status {
		t.Fatalf("%s %s: status %d, want %d: %s", method, rel, r.Status, status, r.Raw)
	}
	if r.Body == nil {
		t.Fatalf("%s %s: body is not a JSON object: %q", method, rel, r.Raw)
	}
	return r
}

// sdk422 wants a 422 in FastAPI's shape whose loc names field.
func (ts *testServer) sdk422(t testing.TB, method, rel string, body map[string]any, loc ...string) v1Reply {
	t.Helper()
	r := ts.sdkStatus(t, method, rel, body, http.StatusUnprocessableEntity)
	det, _ := r.Body["detail"].([]any)
	if len(det) == 0 {
		t.Fatalf("%s %s: 422 without detail: %s", method, rel, r.Raw)
	}
	got, _ := det[0].(map[string]any)["loc"].([]any)
	var gs []string
	for _, g := range got {
		s, _ := g.(string)
		gs = append(gs, s)
	}
	if strings.Join(gs, ".") != strings.Join(loc, ".") {
		t.Fatalf("%s %s: 422 loc %v, want %v: %s", method, rel, gs, loc, r.Raw)
	}
	return r
}

// outs returns data.outputs as objects.
func v1Outs(d map[string]any) []map[string]any { return outputs(d) }
