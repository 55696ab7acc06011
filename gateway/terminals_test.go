package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// @jupyterlab/services' TerminalManager against the terminals API: start,
// the shell's tty is a /dev/pts/N, set_size is what stty size says, Ctrl-C
// ends sleep 100, a second socket gets the recent screen and the same
// shell, shutdown lists it no more.
func TestTerminalsJupyterLabServices(t *testing.T) {
	dir := jlabDir(t)
	ts := startServer(t, Config{Token: "term-token"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "terminals_client.js", ts.URL+"/", "term-token")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node terminals_client.js: %v\n%s", err, out)
	}
	var got struct {
		Name          string   `json:"name"`
		TTY           string   `json:"tty"`
		Size          string   `json:"size"`
		InterruptMs   int      `json:"interruptMs"`
		NotReached    bool     `json:"notReached"`
		Replayed      bool     `json:"replayed"`
		Kept          bool     `json:"kept"`
		RunningBefore []string `json:"runningBefore"`
		RunningAfter  []string `json:"runningAfter"`
	}
	line := ""
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "RESULT ") {
			line = strings.TrimPrefix(l, "RESULT ")
		}
	}
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("client output: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`^/dev/pts/\d+$`).MatchString(got.TTY) || got.Size != "33 101" || got.InterruptMs > 3000 || got.NotReached ||
		!got.Replayed || !got.Kept || !slices.Contains(got.RunningBefore, got.Name) || slices.Contains(got.RunningAfter, got.Name) {
		t.Fatalf("terminal: %+v", got)
	}
	ts.token = "term-token"
	if st, body := ts.callRaw(t, "GET", "/api/terminals"); st != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("after shutdown: %d %s", st, body)
	}
}

// The REST side: create in a folder, get, 404s, a bad cwd, delete.
func TestTerminalsREST(t *testing.T) {
	ts := startServer(t, Config{})
	dir := ts.viewDir(t, "")
	st, m := ts.callAny(t, "POST", "/api/terminals", map[string]any{"cwd": dir})
	name, _ := m.(map[string]any)["name"].(string)
	if st != 200 || name == "" {
		t.Fatalf("create: %d %v", st, m)
	}
	if st, _ := ts.callAny(t, "GET", "/api/terminals/"+name, nil); st != 200 {
		t.Fatalf("get: %d", st)
	}
	if st, _ := ts.callAny(t, "GET", "/api/terminals/nope", nil); st != 404 {
		t.Fatalf("get unknown: %d", st)
	}
	if st, m := ts.callAny(t, "POST", "/api/terminals", map[string]any{"cwd": "/no/such/folder"}); st != 422 || !strings.Contains(m.(map[string]any)["message"].(string), "cwd") {
		t.Fatalf("bad cwd: %d %v", st, m)
	}
	if st, _ := ts.callRaw(t, "DELETE", "/api/terminals/"+name); st != 204 {
		t.Fatalf("delete: %d", st)
	}
	if st, _ := ts.callRaw(t, "DELETE", "/api/terminals/"+name); st != 404 {
		t.Fatalf("delete again: %d", st)
	}
	// A terminal left open is closed at shutdown (the leak check at the end of the run sees no shell).
	if st, _ := ts.callAny(t, "POST", "/api/terminals", nil); st != 200 {
		t.Fatalf("create: %d", st)
	}
}

// callAny sends a request, checks its answer against openapi.json and
// decodes it, whatever JSON it is.
func (ts *testServer) callAny(t testing.TB, method, path string, body any) (int, any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
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
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	checkAnswer(t, req, resp, raw)
	var v any
	_ = json.Unmarshal(raw, &v)
	return resp.StatusCode, v
}
