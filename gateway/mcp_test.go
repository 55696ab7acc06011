package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-json"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpsrv "github.com/aiod/aiod/gateway/mcp"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// mcpClient connects the Go SDK's own client to ts over real HTTP.
func mcpClient(t *testing.T, ts *testServer, token string, onProgress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession {
	t.Helper()
	return mcpClientAt(t, ts, mcpsrv.Path, token, onProgress)
}

// mcpClientAt is mcpClient on the endpoint at path.
func mcpClientAt(t *testing.T, ts *testServer, path, token string, onProgress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := mcp.NewClient(&mcp.Implementation{Name: "aiod-go-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if onProgress != nil {
				onProgress(req.Params)
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: ts.URL + path, HTTPClient: &http.Client{Transport: bearer{token, tr}},
	}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", path, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, progress any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	if progress != nil {
		p.SetProgressToken(progress)
	}
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	return res
}

func texts(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPGoSDK drives /mcp with the official Go SDK's client over real HTTP
// through the guard: initialize, tools/list, execute_code (a Python chart
// as image content, JavaScript, an error with its traceback, a session
// kept across two calls, streamed progress), and the other tools.
func TestMCPGoSDK(t *testing.T) {
	t.Parallel()
	const token = "mcp-token"
	ts := startServer(t, Config{Token: token})
	// The progress run's code waits for this file, which the handler makes
	// once the first notification has reached the client.
	gate := ts.viewDir(t, "token") + "/first-line-seen"
	hostGate := ts.hostPath(t, "token", gate)
	var mu sync.Mutex
	var progress []string
	var gateErr error // of the first notification's gate; read once the run is over
	cs := mcpClient(t, ts, token, func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, p.Message)
		if len(progress) == 1 {
			gateErr = os.WriteFile(hostGate, nil, 0o644)
		}
	})
	if init := cs.InitializeResult(); init.ServerInfo.Name != "aiod" || init.ServerInfo.Version != Version || init.ProtocolVersion < "2025-06-18" {
		t.Fatalf("initialize: server %+v, protocol %s", init.ServerInfo, init.ProtocolVersion)
	}
	ctx := context.Background()
	tl, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range tl.Tools {
		names[tool.Name] = true
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s has no description or input schema", tool.Name)
		}
	}
	for _, want := range []string{"execute_code", "list_sessions", "delete_session", "read_file", "write_file", "list_files"} {
		if !names[want] {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}

	// Python with a chart: the PNG comes back as image content.
	chart := callTool(t, cs, "execute_code", map[string]any{"language": "python", "code": "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.show()"}, nil)
	var img *mcp.ImageContent
	for _, c := range chart.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			img = ic
		}
	}
	if chart.IsError || img == nil || img.MIMEType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG\r\n\x1a\n")) {
		raw, _ := json.Marshal(chart.Content)
		t.Fatalf("chart: want image/png content, got isError=%v %d contents: %.300s", chart.IsError, len(chart.Content), raw)
	}
	var sc struct {
		Success bool `json:"success"`
		Data    struct {
			Status    string  `json:"status"`
			SessionID *string `json:"session_id"`
			Outputs   []any   `json:"outputs"`
		} `json:"data"`
	}
	raw, _ := json.Marshal(chart.StructuredContent)
	if err := json.Unmarshal(raw, &sc); err != nil || !sc.Success || sc.Data.Status != "ok" || len(sc.Data.Outputs) != 1 {
		t.Fatalf("structured content is not the v2 answer: %s", raw)
	}

	// JavaScript, in a session kept across two calls.
	if r := callTool(t, cs, "execute_code", map[string]any{"language": "javascript", "code": "globalThis.n = 41", "session_id": "mcp-js"}, nil); r.IsError {
		t.Fatalf("js 1: %s", texts(r))
	}
	if r := callTool(t, cs, "execute_code", map[string]any{"language": "javascript", "code": "console.log(n + 1)", "session_id": "mcp-js"}, nil); r.IsError || texts(r) != "42\n" {
		t.Fatalf("js 2: isError=%v %q", r.IsError, texts(r))
	}
	// Python in a session too.
	callTool(t, cs, "execute_code", map[string]any{"language": "python", "code": "x = 20", "session_id": "mcp-py"}, nil)
	if r := callTool(t, cs, "execute_code", map[string]any{"language": "python", "code": "x * 2 + 2", "session_id": "mcp-py"}, nil); r.IsError || texts(r) != "42" {
		t.Fatalf("python session: isError=%v %q", r.IsError, texts(r))
	}

	// An error: isError, the exception and its traceback.
	if r := callTool(t, cs, "execute_code", map[string]any{"language": "python", "code": "def f():\n    return 1/0\nf()"}, nil); !r.IsError ||
		!strings.Contains(texts(r), "ZeroDivisionError: division by zero") || !strings.Contains(texts(r), "return 1/0") {
		t.Fatalf("error: isError=%v %q", r.IsError, texts(r))
	}
	// Bad arguments: a tool error naming the field, not a protocol error.
	if r := callTool(t, cs, "execute_code", map[string]any{"language": "ruby", "code": "1"}, nil); !r.IsError || !strings.Contains(texts(r), "language") {
		t.Fatalf("bad language: isError=%v %q", r.IsError, texts(r))
	}

	// Progress: each line arrives as a notification while the code runs,
	// before the result. After its first line the code waits until that
	// line's notification has reached the client (the handler makes the
	// gate file): a bridge that held the stream back until the code ended
	// would leave it waiting until its own deadline, and the run would
	// fail.
	code := fmt.Sprintf("import os, time\nprint('line 0', flush=True)\nfor _ in range(1200):\n    if os.path.exists(%q):\n        break\n    time.sleep(0.05)\nelse:\n    raise SystemExit('the first line never reached the client')\nprint('line 1', flush=True)\nprint('line 2', flush=True)", gate)
	r := callTool(t, cs, "execute_code", map[string]any{"language": "python", "code": code, "timeout": 120}, "tok-1")
	// The server sends every notification before the result, but the
	// SDK's client hands them to the handler on goroutines of its own: the
	// last may reach it just after the call returned.
	var got []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got = append([]string(nil), progress...)
		mu.Unlock()
		if len(got) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	err = gateErr
	mu.Unlock()
	if err != nil {
		t.Fatalf("make the gate: %v", err)
	}
	if r.IsError || texts(r) != "line 0\nline 1\nline 2\n" {
		t.Fatalf("progress run: isError=%v %q", r.IsError, texts(r))
	}
	if strings.Join(got, "") != "line 0\nline 1\nline 2\n" {
		t.Fatalf("progress notifications %q, want the three lines", got)
	}

	// The file tools, through the file plane's functions.
	dir := t.TempDir()
	if r := callTool(t, cs, "write_file", map[string]any{"path": filepath.Join(dir, "a", "note.txt"), "content": "hello mcp"}, nil); r.IsError {
		t.Fatalf("write_file: %s", texts(r))
	}
	if r := callTool(t, cs, "read_file", map[string]any{"path": filepath.Join(dir, "a", "note.txt")}, nil); r.IsError || texts(r) != "hello mcp" {
		t.Fatalf("read_file: %v %q", r.IsError, texts(r))
	}
	if r := callTool(t, cs, "list_files", map[string]any{"path": filepath.Join(dir, "a")}, nil); r.IsError || !strings.Contains(texts(r), `"name":"note.txt"`) {
		t.Fatalf("list_files: %v %q", r.IsError, texts(r))
	}
	if r := callTool(t, cs, "read_file", map[string]any{"path": filepath.Join(dir, "missing")}, nil); !r.IsError || !strings.Contains(texts(r), "no such file") {
		t.Fatalf("read_file of a missing file: %v %q", r.IsError, texts(r))
	}
	if r := callTool(t, cs, "read_file", map[string]any{"path": "relative.txt"}, nil); !r.IsError || !strings.Contains(texts(r), "absolute") {
		t.Fatalf("read_file of a relative path: %v %q", r.IsError, texts(r))
	}
	// Sessions.
	if r := callTool(t, cs, "list_sessions", map[string]any{}, nil); r.IsError || !strings.Contains(texts(r), `"session_id":"mcp-js"`) {
		t.Fatalf("list_sessions: %q", texts(r))
	}
	if r := callTool(t, cs, "delete_session", map[string]any{"session_id": "mcp-js"}, nil); r.IsError {
		t.Fatalf("delete_session: %q", texts(r))
	}
	if r := callTool(t, cs, "delete_session", map[string]any{"session_id": "mcp-js"}, nil); !r.IsError || !strings.Contains(texts(r), "not found") {
		t.Fatalf("delete_session again: %v %q", r.IsError, texts(r))
	}
	if ts.Registry().Get("token", "javascript", "mcp-js") != nil {
		t.Fatal("mcp-js still exists")
	}
}

// TestMCPGuard: /mcp is behind the same Host, Origin and credential rules
// as the API.
func TestMCPGuard(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Token: "t0k"})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	post := func(h map[string]string) (int, string) {
		req, _ := http.NewRequest("POST", ts.URL+mcpsrv.Path, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		if h["Host"] != "" {
			req.Host = h["Host"]
		}
		resp, err := ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAllClose(t, resp)
		return resp.StatusCode, string(b)
	}
	if st, b := post(nil); st != 401 {
		t.Fatalf("no token: %d %s", st, b)
	}
	if st, b := post(map[string]string{"Authorization": "Bearer t0k", "Origin": "http://evil.example"}); st != 403 || !strings.Contains(b, "--allowed-origins") {
		t.Fatalf("foreign origin: %d %s", st, b)
	}
	if st, b := post(map[string]string{"Authorization": "Bearer t0k", "Host": "evil.example"}); st != 403 || !strings.Contains(b, "--allowed-hosts") {
		t.Fatalf("foreign host: %d %s", st, b)
	}
	if st, b := post(map[string]string{"Authorization": "Bearer t0k"}); st != 200 || !strings.Contains(b, `"serverInfo"`) {
		t.Fatalf("with the token: %d %s", st, b)
	}
}

// TestMCPTypeScriptSDK runs the official TypeScript SDK
// (@modelcontextprotocol/sdk, from gateway/testdata/mcp/package-lock.json,
// installed by .ci/deps.sh, or here when missing) in Node against a live
// gateway.
func TestMCPTypeScriptSDK(t *testing.T) {
	t.Parallel()
	client := kerneltest.NodeModules(t, "testdata/mcp", "@modelcontextprotocol/sdk")
	const token = "ts-token"
	ts := startServer(t, Config{Token: token})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd, stderr := kerneltest.Node(ctx, client, "mcp_client.mjs", ts.URL+mcpsrv.Path, token, dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node mcp_client.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	var got struct {
		Failure  string
		Server   struct{ Name, Version string }
		Protocol *string
		Tools    []struct {
			Name     string
			Required []string
		}
		Chart struct {
			IsError          bool
			Types, Mime      []string
			PngMagic         []string
			Text             []string
			StructuredStatus string
			Progress         []string
		}
		JS struct {
			Text    []string
			Session string
			First   any // the first call's isError, message and data
			Message *string
			Fresh   any
		}
		Error, Bad struct {
			IsError bool
			Text    string
		}
		Files struct {
			Read string
			List []string
		}
		Sessions []string
		Deleted  bool
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
		t.Fatalf("node said %q: %v", out, err)
	}
	t.Logf("TypeScript SDK saw: %s", out)
	if got.Failure != "" {
		t.Fatalf("the TypeScript client failed: %s\n%s", got.Failure, stderr.String())
	}
	if got.Server.Name != "aiod" || len(got.Tools) != 6 {
		t.Fatalf("server %+v, tools %+v", got.Server, got.Tools)
	}
	if got.Chart.IsError || len(got.Chart.Mime) != 1 || got.Chart.Mime[0] != "image/png" || got.Chart.PngMagic[0] != "89504e47" || got.Chart.StructuredStatus != "ok" {
		t.Fatalf("chart: %+v", got.Chart)
	}
	if strings.Join(got.Chart.Progress, "") == "" || !strings.Contains(strings.Join(got.Chart.Progress, "|"), "drawing") {
		t.Fatalf("chart progress: %q", got.Chart.Progress)
	}
	if strings.Join(got.JS.Text, "") != "42\n" || got.JS.Session != "ts-sess" {
		msg := ""
		if got.JS.Message != nil {
			msg = *got.JS.Message
		}
		t.Fatalf("js session: %q (message %q, fresh_runtime %v); the first call: %+v", got.JS.Text, msg, got.JS.Fresh, got.JS.First)
	}
	if !got.Error.IsError || !strings.Contains(got.Error.Text, "ZeroDivisionError") {
		t.Fatalf("error: %+v", got.Error)
	}
	if !got.Bad.IsError || !strings.Contains(got.Bad.Text, "language") {
		t.Fatalf("bad language: %+v", got.Bad)
	}
	if got.Files.Read != "hi from ts" || len(got.Files.List) != 1 || got.Files.List[0] != "hello.txt" {
		t.Fatalf("files: %+v", got.Files)
	}
	if !strings.Contains(strings.Join(got.Sessions, ","), "ts-sess") || !got.Deleted {
		t.Fatalf("sessions %v, deleted %v", got.Sessions, got.Deleted)
	}
}

// Progress past mcpsrv.ProgressBytes is left out and counted: one output larger
// than the bound is never queued.
func TestMCPProgressDropsAreCounted(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	var mu sync.Mutex
	var sizes []int
	cs := mcpClient(t, ts, "", func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		sizes = append(sizes, len(p.Message))
		mu.Unlock()
	})
	counters := ts.Registry().Counters()
	before := counters.Get(mcpsrv.ProgressDrops, "queue_full")
	code := fmt.Sprintf("from IPython.display import display\nprint('small', flush=True)\ndisplay({'text/plain': 'x' * %d}, raw=True)", mcpsrv.ProgressBytes+1)
	r := callTool(t, cs, "execute_code", map[string]any{"language": "python", "code": code}, "tok-big")
	if r.IsError {
		t.Fatalf("big output: %q", texts(r))
	}
	if got := counters.Get(mcpsrv.ProgressDrops, "queue_full") - before; got != 1 {
		t.Fatalf("progress drops (queue_full) moved by %d, want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 1 {
		t.Fatalf("progress notifications of %v bytes, want only the small line's", sizes)
	}
}
