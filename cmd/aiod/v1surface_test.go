package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// sdk sends a request to c's daemon as the agent_sandbox SDK's httpx
// client does: a relative v1 path, X-Fern-Language, a JSON body of the
// arguments given (none: Content-Length 0), the bearer token; it returns
// the status, the raw body and the JSON object in it (nil if none).
func (c *caller) sdk(ctx context.Context, method, rel string, body map[string]any) (int, []byte, map[string]any) {
	c.t.Helper()
	var rd io.Reader = http.NoBody
	n := int64(0)
	if body != nil {
		b, _ := json.Marshal(body)
		rd, n = bytes.NewReader(b), int64(len(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.d.url+"/"+rel, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.ContentLength = n
	req.Header.Set("X-Fern-Language", "Python")
	req.Header.Set("content-type", "application/json")
	req.Header.Set("User-Agent", "python-httpx/0.28.1")
	req.Header.Set("Accept", "*/*")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.d.client.Do(req)
	if err != nil {
		c.t.Fatalf("%s: %s %s: %v", c.name, method, rel, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, raw, m
}

// sdkOK is sdk wanting 200; it returns the JSON object.
func (c *caller) sdkOK(ctx context.Context, method, rel string, body map[string]any) map[string]any {
	c.t.Helper()
	st, raw, m := c.sdk(ctx, method, rel, body)
	if st != http.StatusOK || m == nil {
		c.t.Fatalf("%s: %s %s: %d %.1000s", c.name, method, rel, st, raw)
	}
	return m
}

// sdkStatus is sdk wanting status.
func (c *caller) sdkStatus(ctx context.Context, method, rel string, body map[string]any, status int) {
	c.t.Helper()
	if st, raw, _ := c.sdk(ctx, method, rel, body); st != status {
		c.t.Fatalf("%s: %s %s: %d, want %d: %.1000s", c.name, method, rel, st, status, raw)
	}
}

// TestV1SurfaceOnTheBinary replays the agent_sandbox SDK's calls of issue
// 42 against the real daemon, two JWT tenants under tenant isolation:
// file watches (a file from code and one from the plane, a cursor that
// gives nothing old, wait, the SSE stream, a stopped watcher 404),
// observation (start, live, stop, a report downloaded), a skill from a
// zip (front matter as metadata, content without it), the /v1/shell/ws
// terminal; bob reaches none of alice's.
func TestV1SurfaceOnTheBinary(t *testing.T) {
	t.Parallel()
	priv, pub := tenantKey(t)
	keyFile := filepath.Join(t.TempDir(), "jwt.pub")
	if err := os.WriteFile(keyFile, []byte(pub), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--jwt-public-key-file", keyFile)
	alice := &caller{t: t, d: d, name: "alice", token: tenantJWT(t, priv, "alice")}
	bob := &caller{t: t, d: d, name: "bob", token: tenantJWT(t, priv, "bob")}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// File watch.
	alice.run(ctx, "python", "", "import os; os.makedirs('/tmp/w', exist_ok=True)")
	w := alice.sdkOK(ctx, "POST", "v1/file/watch", map[string]any{"path": "/tmp/w", "recursive": true, "debounce": 50})
	id, _ := w["watcher_id"].(string)
	if id == "" {
		t.Fatalf("watch_create: %v", w)
	}
	// Written whole, then moved in: one event. (Written in place, its
	// creation and its content could reach two scans, and the second
	// event is new, not old.)
	alice.run(ctx, "python", "", "import os\nopen('/tmp/code.tmp', 'w').write('c')\nos.rename('/tmp/code.tmp', '/tmp/w/code.txt')")
	cursor := 0.0
	events := func(timeout int) []string {
		t.Helper()
		p := alice.sdkOK(ctx, "POST", "v1/file/watch/"+id+"/poll", map[string]any{"cursor": cursor, "limit": 100, "timeout": timeout})
		var got []string
		for _, e := range p["events"].([]any) {
			got = append(got, e.(map[string]any)["path"].(string))
		}
		cursor = p["cursor"].(float64)
		return got
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(strings.Join(events(10), ","), "/tmp/w/code.txt"); {
		if time.Now().After(deadline) {
			t.Fatal("no event of a file code wrote")
		}
	}
	if old := events(0); len(old) != 0 {
		t.Errorf("a poll from the cursor returned old events: %v", old)
	}
	alice.sdkOK(ctx, "POST", "v1/file/write", map[string]any{"file": "/tmp/w/plane.txt", "content": "p"})
	for deadline := time.Now().Add(time.Minute); !strings.Contains(strings.Join(events(10), ","), "/tmp/w/plane.txt"); {
		if time.Now().After(deadline) {
			t.Fatal("no event of a file the plane wrote")
		}
	}
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		alice.run(ctx, "python", "", "open('/tmp/w/late.txt', 'w').write('l')")
	}()
	wait := alice.sdkOK(ctx, "POST", "v1/file/watch/wait", map[string]any{"path": "/tmp/w/late.txt", "timeout": 60})
	<-wrote
	if ev, _ := wait["event"].(map[string]any); ev["path"] != "/tmp/w/late.txt" {
		t.Errorf("watch_wait: %v", wait)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/v1/file/watch/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+alice.token)
	req.Header.Set("X-Fern-Language", "Python")
	resp, err := d.client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("watch_events: %v %v", resp, err)
	}
	var sse []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && (len(sse) == 0 || sse[len(sse)-1] != "file_change") {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			sse = append(sse, ev)
			if ev == "watch_started" {
				alice.run(ctx, "python", "", "open('/tmp/w/sse.txt', 'w').write('s')")
			}
		}
	}
	resp.Body.Close()
	if len(sse) < 2 || sse[0] != "watch_started" || sse[len(sse)-1] != "file_change" {
		t.Errorf("SSE events %v", sse)
	}
	bob.sdkStatus(ctx, "POST", "v1/file/watch/"+id+"/poll", map[string]any{}, http.StatusNotFound)
	alice.sdkOK(ctx, "DELETE", "v1/file/watch/"+id, nil)
	alice.sdkStatus(ctx, "POST", "v1/file/watch/"+id+"/poll", map[string]any{}, http.StatusNotFound)

	// Observation.
	alice.run(ctx, "python", "obs", "x = bytearray(40 << 20)")
	start := alice.sdkOK(ctx, "POST", "v1/sandbox/observe/start", map[string]any{"interval_seconds": 0.25})["data"].(map[string]any)
	obs, _ := start["session_id"].(string)
	live := alice.sdkOK(ctx, "GET", "v1/sandbox/observe/live?top_rows=5", nil)["data"].(map[string]any)
	if procs := live["top_processes"].([]any); len(procs) == 0 || procs[0].(map[string]any)["rss_bytes"].(float64) < 40<<20 || live["scope"] != "tenant" {
		t.Fatalf("observe_live: %v", live)
	}
	if other := bob.sdkOK(ctx, "GET", "v1/sandbox/observe/live", nil)["data"].(map[string]any); len(other["top_processes"].([]any)) != 0 {
		t.Errorf("bob reads alice's processes: %v", other["top_processes"])
	}
	stop := alice.sdkOK(ctx, "POST", "v1/sandbox/observe/stop", map[string]any{"session_id": obs})["data"].(map[string]any)
	if stop["stopped"] != true || stop["report_ready"] != true {
		t.Fatalf("observe_stop: %v", stop)
	}
	reps := alice.sdkOK(ctx, "GET", "v1/sandbox/observe/reports", nil)["data"].([]any)
	if len(reps) != 1 {
		t.Fatalf("observe_reports: %v", reps)
	}
	rid := reps[0].(map[string]any)["report_id"].(string)
	st, raw, _ := alice.sdk(ctx, "GET", "v1/sandbox/observe/reports/"+rid, nil)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if st != 200 || err != nil {
		t.Fatalf("observe_report_download: %d %v", st, err)
	}
	lines, _ := io.ReadAll(zr)
	if !bytes.HasPrefix(lines, []byte(`{"type":"observation"`)) || !bytes.Contains(lines, []byte(`{"type":"sample"`)) {
		t.Errorf("the report: %.500s", lines)
	}
	bob.sdkStatus(ctx, "GET", "v1/sandbox/observe/reports/"+rid, nil, http.StatusNotFound)

	// A skill from a zip.
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for name, body := range map[string]string{
		"helper/SKILL.md":        "---\nname: zip-helper\ndescription: from a zip\n---\nRun scripts/run.sh.\n",
		"helper/scripts/run.txt": "notes\n",
	} {
		f, _ := zw.Create(name)
		_, _ = f.Write([]byte(body))
	}
	_ = zw.Close()
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("path", "/tmp/skills")
	fw, _ := mw.CreateFormFile("file", "skills.zip")
	_, _ = fw.Write(zbuf.Bytes())
	_ = mw.Close()
	sreq, _ := http.NewRequestWithContext(ctx, "POST", d.url+"/v1/skills/register", &form)
	sreq.Header.Set("Content-Type", mw.FormDataContentType())
	sreq.Header.Set("X-Fern-Language", "Python")
	sreq.Header.Set("Authorization", "Bearer "+alice.token)
	sresp, err := d.client.Do(sreq)
	if err != nil {
		t.Fatal(err)
	}
	sraw, _ := io.ReadAll(sresp.Body)
	sresp.Body.Close()
	if sresp.StatusCode != 200 || !bytes.Contains(sraw, []byte(`"zip-helper"`)) {
		t.Fatalf("register_skills: %d %s", sresp.StatusCode, sraw)
	}
	meta := alice.sdkOK(ctx, "GET", "v1/skills/metadatas", nil)["data"].(map[string]any)["skills"].([]any)
	if len(meta) != 1 || meta[0].(map[string]any)["metadata"].(map[string]any)["description"] != "from a zip" {
		t.Errorf("list_metadata: %v", meta)
	}
	if c := alice.sdkOK(ctx, "GET", "v1/skills/zip-helper/content", nil)["data"].(map[string]any); c["content"] != "Run scripts/run.sh.\n" {
		t.Errorf("get_content: %v", c)
	}
	bob.sdkStatus(ctx, "GET", "v1/skills/zip-helper/content", nil, http.StatusNotFound)
	alice.sdkOK(ctx, "DELETE", "v1/skills/zip-helper", nil)
	alice.sdkStatus(ctx, "GET", "v1/skills/zip-helper/content", nil, http.StatusNotFound)

	// The terminal WebSocket.
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(d.url, "http")+"/v1/shell/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + alice.token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	in, _ := json.Marshal(map[string]any{"type": "input", "data": "echo term-$((6*7)); id -un\n"})
	var screen strings.Builder
	sent := false
	for !strings.Contains(screen.String(), "term-42") {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read the terminal: %v; screen %q", err, screen.String())
		}
		var m struct {
			Type string `json:"type"`
			Data any    `json:"data"`
		}
		_ = json.Unmarshal(b, &m)
		switch {
		case m.Type == "ready" && !sent:
			sent = true
			if err := c.Write(ctx, websocket.MessageText, in); err != nil {
				t.Fatal(err)
			}
		case m.Type == "output":
			screen.WriteString(m.Data.(string))
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
}
