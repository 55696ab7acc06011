package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"

	"github.com/goccy/go-json"
)

// TestMain fails the run if a test leaves a goroutine or a child process.
func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }

// testServer is a live gateway on a random loopback port.
type testServer struct {
	*Server
	URL    string
	client *http.Client
	token  string // when set, call and callRaw send it as a bearer token
}

// startServer starts a gateway with cfg (defaults filled) and stops it,
// with every runtime, when the test ends.
func startServer(t testing.TB, cfg Config) *testServer {
	t.Helper()
	if cfg.KernelStartTimeout == 0 {
		cfg.KernelStartTimeout = 120 * time.Second
	}
	if cfg.Isolation.StateDir == "" {
		// The daemon's default: tenant isolation where the machine allows
		// it (it needs a state directory); a test asks for "none" to run
		// on the shared host.
		cfg.Isolation.StateDir = t.TempDir()
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
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
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if ts.token != "" {
		req.Header.Set("Authorization", "Bearer "+ts.token)
	}
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
	req, err := http.NewRequest(method, ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ts.token != "" {
		req.Header.Set("Authorization", "Bearer "+ts.token)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	checkAnswer(t, req, resp, b)
	return resp.StatusCode, string(b)
}
