package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/gateway/openapi/openapitest"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// TestMain fails the run if a test leaves a goroutine or a child process,
// or if an answer the handler tests saw has a status its route in
// openapi.json does not declare (only its default covers it).
func TestMain(m *testing.M) {
	code := kerneltest.Run(m)
	report, undeclared := openapitest.Statuses()
	switch {
	case undeclared > 0:
		fmt.Fprintf(os.Stderr, "openapi.json: %d statuses the handler tests saw are not declared by their route (marked !); declare them:\n%s", undeclared, report)
		if code == 0 {
			code = 1
		}
	case testing.Verbose() && report != "":
		fmt.Fprintf(os.Stderr, "openapi.json: the statuses the handler tests saw, per route (all declared):\n%s", report)
	}
	os.Exit(code)
}

// testServer is a live gateway on a random loopback port.
type testServer struct {
	*Server
	URL    string
	client *http.Client
	token  string // when set, call and callRaw send it as a bearer token
}

// serverOpt asks startServer and newServer for more than cfg says.
type serverOpt int

// warmKernels keeps the daemon's kernel warm-up: without it a test
// server's kernel templates import ipykernel alone, since pandas and
// matplotlib cost every server that starts a kernel a second or two of
// CPU that most tests do not use (the kernel imports them on first use).
const warmKernels serverOpt = 1

// startServer starts a gateway with cfg (defaults filled) and stops it,
// with every runtime, when the test ends.
func startServer(t testing.TB, cfg Config, opts ...serverOpt) *testServer {
	t.Helper()
	srv := newServer(t, cfg, opts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	ts := &testServer{Server: srv, URL: "http://" + ln.Addr().String(),
		client: &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
		ts.client.CloseIdleConnections()
	})
	return ts
}

// newServer makes a gateway with cfg, defaults filled as the daemon's (its
// caller serves and shuts it down).
func newServer(t testing.TB, cfg Config, opts ...serverOpt) *Server {
	t.Helper()
	kerneltest.SkipShort(t, "a gateway with real runtimes")
	if !slices.Contains(opts, warmKernels) {
		cfg.NoKernelWarmup = true
	}
	if cfg.KernelStartTimeout == 0 {
		cfg.KernelStartTimeout = 120 * time.Second
	}
	if cfg.NativeStartTimeout == 0 { // a loaded CI took 12 s for a bash REPL
		cfg.NativeStartTimeout = 60 * time.Second
	}
	if cfg.Isolation.StateDir == "" {
		// The daemon's default: tenant isolation where the machine allows
		// it (it needs a state directory); a test asks for "none" to run
		// on the shared host.
		cfg.Isolation.StateDir = t.TempDir()
	}
	if cfg.Isolation.FirstUID == 0 {
		cfg.Isolation.FirstUID, cfg.Isolation.LastUID = kerneltest.UIDRange(t)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// request is a request to ts for path, with ts's bearer token when it has
// one.
func (ts *testServer) request(t testing.TB, method, path string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if ts.token != "" {
		req.Header.Set("Authorization", "Bearer "+ts.token)
	}
	return req
}

// call sends a request and decodes the JSON answer.
func (ts *testServer) call(t testing.TB, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = strings.NewReader(string(b))
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = strings.NewReader(string(j))
	}
	req := ts.request(t, method, path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	checkAnswer(t, req, resp, raw)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s %s: status %d, body is not JSON: %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

// exec posts /v2/code/execute and returns status, envelope and data.
func (ts *testServer) exec(t testing.TB, body map[string]any) (int, map[string]any, map[string]any) {
	t.Helper()
	st, env := ts.call(t, "POST", "/v2/code/execute", body)
	data, _ := env["data"].(map[string]any)
	return st, env, data
}

func processAlive(pid int) bool { return kerneltest.Alive(pid) }

// callRaw sends a request and returns the status and the body as text.
func (ts *testServer) callRaw(t testing.TB, method, path string) (int, string) {
	t.Helper()
	req := ts.request(t, method, path, nil)
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	checkAnswer(t, req, resp, b)
	return resp.StatusCode, string(b)
}

// viewDir makes a fresh folder that the tenant's runtimes and file plane
// see (under tenant isolation, in its /tmp) and returns its path as they
// see it; without isolation, a temporary folder of the test.
func (ts *testServer) viewDir(t testing.TB, tenant string) string {
	t.Helper()
	if !ts.rt.Tenanted() {
		return t.TempDir()
	}
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	p := fmt.Sprintf("/tmp/%s-%d", name, time.Now().UnixNano())
	view, err := ts.core.View(tenant)
	if err != nil {
		t.Fatal(err)
	}
	if err := view.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// hostPath is where a path of the tenant's view lies on the host: its
// /tmp, /var/tmp, HOME and working folder are folders of the state
// directory; anything else is the host's own (read-only to the tenant).
func (ts *testServer) hostPath(t testing.TB, tenant, p string) string {
	t.Helper()
	if !ts.rt.Tenanted() {
		return p
	}
	tn, err := ts.rt.TenantSandbox(tenant)
	if err != nil {
		t.Fatal(err)
	}
	v := tn.View()
	for _, m := range []struct{ at, backing string }{
		{v.WorkPath, v.Work}, {v.HomePath, v.Home}, {"/tmp", v.Tmp}, {"/var/tmp", v.VarTmp}, {"/dev/shm", v.Shm},
	} {
		if m.backing == "" {
			continue
		}
		if p == m.at || strings.HasPrefix(p, m.at+"/") {
			return m.backing + strings.TrimPrefix(p, m.at)
		}
	}
	return p
}
