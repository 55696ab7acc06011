package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestV1FileWatch drives the SDK's watch_create, watch_poll, watch_wait,
// watch_events, watch_list and watch_stop as it sends them (issue 42): a
// watcher sees a file written by code and one written through the plane;
// a poll from the returned cursor returns nothing old; wait returns its
// file's event; the SSE stream starts with watch_started and carries
// file_change; another tenant's watcher is 404 to it; a stopped one is 404.
func TestV1FileWatch(t *testing.T) {
	t.Parallel()
	ts, alice, bob := twoTenants(t)
	run := func(code string) {
		t.Helper()
		if st, env, _ := alice.exec(t, map[string]any{"language": "python", "code": code}); st != 200 || env["success"] != true {
			t.Fatalf("%q: %d %v", code, st, env)
		}
	}
	run("import os; os.makedirs('/tmp/w/sub', exist_ok=True)")

	c := alice.sdkOK(t, "POST", "v1/file/watch", map[string]any{"path": "/tmp/w", "recursive": true, "debounce": 50})
	id, _ := c.data()["watcher_id"].(string)
	if id == "" || c.Body["watcher_id"] != id {
		t.Fatalf("create: %s (want watcher_id at the top and under data)", c.Raw)
	}
	// poll long-polls until the events of what code writes.
	run("open('/tmp/w/sub/out.json', 'w').write('{}')")
	type pollAnswer struct {
		Events []struct {
			Seq          int64  `json:"seq"`
			Type         string `json:"type"`
			Path         string `json:"path"`
			RelativePath string `json:"relative_path"`
		} `json:"events"`
		Cursor   int64 `json:"cursor"`
		Overflow bool  `json:"overflow"`
	}
	poll := func(cursor int64, timeout int) pollAnswer {
		t.Helper()
		r := alice.sdkOK(t, "POST", "v1/file/watch/"+id+"/poll", map[string]any{"cursor": cursor, "limit": 100, "timeout": timeout})
		var a pollAnswer
		if err := json.Unmarshal(r.Raw, &a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	var cursor int64
	var seen []string
	for deadline := time.Now().Add(time.Minute); !strings.Contains(strings.Join(seen, ","), "sub/out.json"); {
		a := poll(cursor, 10)
		for _, e := range a.Events {
			seen = append(seen, e.Type+" "+e.RelativePath)
		}
		cursor = a.Cursor
		if time.Now().After(deadline) {
			t.Fatalf("no event of sub/out.json in a minute: %v", seen)
		}
	}
	if !strings.Contains(strings.Join(seen, ","), "create sub/out.json") {
		t.Errorf("events %v, want a create of sub/out.json", seen)
	}
	// Nothing old from the cursor: only what came after it (the write
	// that followed the create may come late, past the debounce, on a
	// loaded machine).
	if a := poll(cursor, 0); a.Cursor < cursor || len(a.Events) > 0 && a.Events[0].Seq <= cursor {
		t.Errorf("poll from cursor %d: %+v", cursor, a)
	}
	// A file written through the plane: its event comes, after any late
	// one of sub/out.json, and nothing else.
	alice.sdkOK(t, "POST", "v1/file/write", map[string]any{"file": "/tmp/w/plane.txt", "content": "x"})
	for deadline, found := time.Now().Add(time.Minute), false; !found; {
		a := poll(cursor, 10)
		for _, e := range a.Events {
			switch {
			case e.Seq <= cursor:
				t.Fatalf("poll from cursor %d gave event %d again: %+v", cursor, e.Seq, a)
			case e.Path == "/tmp/w/plane.txt":
				found = true
			case e.RelativePath != "sub/out.json":
				t.Fatalf("after a plane write: an event of another file: %+v", a)
			}
		}
		cursor = a.Cursor
		if !found && time.Now().After(deadline) {
			t.Fatalf("no event of plane.txt in a minute after its write")
		}
	}

	// wait: the event of its file.
	// Written while the wait starts: before it looks (a create at once) or
	// after (the watcher's event), the answer is the file's.
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		if st, env, _ := alice.exec(t, map[string]any{"language": "python", "code": "open('/tmp/w/late.txt', 'w').write('late')"}); st != 200 || env["success"] != true {
			t.Errorf("write late.txt: %d %v", st, env)
		}
	}()
	defer func() { <-wrote }()
	wr := alice.sdkOK(t, "POST", "v1/file/watch/wait", map[string]any{"path": "/tmp/w/late.txt", "timeout": 60, "event_types": []string{"create", "write"}})
	if ev, _ := wr.Body["event"].(map[string]any); ev["path"] != "/tmp/w/late.txt" {
		t.Errorf("wait: %s", wr.Raw)
	}

	// SSE: watch_started, then file_change.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/file/watch/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+alice.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := ts.client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("events: %v %v", resp, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for sc.Scan() {
		line := sc.Text()
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, ev)
			if ev == "watch_started" {
				run("open('/tmp/w/sse.txt', 'w').write('s')")
			}
			if ev == "file_change" {
				break
			}
		}
	}
	if len(events) < 2 || events[0] != "watch_started" || events[len(events)-1] != "file_change" {
		t.Errorf("SSE events %v", events)
	}
	cancel()

	bob.sdkStatus(t, "POST", "v1/file/watch/"+id+"/poll", map[string]any{}, http.StatusNotFound)
	if l := bob.sdkOK(t, "GET", "v1/file/watch", nil); l.Body["count"] != 0.0 {
		t.Errorf("bob lists alice's watchers: %s", l.Raw)
	}
	if l := alice.sdkOK(t, "GET", "v1/file/watch", nil); l.Body["count"] != 1.0 {
		t.Errorf("alice's watchers: %s", l.Raw)
	}
	bob.sdkStatus(t, "DELETE", "v1/file/watch/"+id, nil, http.StatusNotFound)
	alice.sdkOK(t, "DELETE", "v1/file/watch/"+id, nil)
	alice.sdkStatus(t, "POST", "v1/file/watch/"+id+"/poll", map[string]any{}, http.StatusNotFound)
	alice.sdk422(t, "POST", "v1/file/watch", map[string]any{"path": "/tmp/w", "debounce": 10}, "body", "debounce")
	alice.sdkStatus(t, "POST", "v1/file/watch", map[string]any{"path": "/tmp/nowhere"}, http.StatusNotFound)
}

// TestV2FileWatch: the same watches at /v2/fs/watch, with v2's 422.
func TestV2FileWatch(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	if st, env, _ := ts.exec(t, map[string]any{"language": "python", "code": "import os; os.makedirs('/tmp/w2', exist_ok=True)"}); st != 200 || env["success"] != true {
		t.Fatalf("mkdir: %d %v", st, env)
	}
	st, env := ts.call(t, "POST", "/v2/fs/watch", map[string]any{"path": "/tmp/w2", "debounce": 50})
	data, _ := env["data"].(map[string]any)
	id, _ := data["watcher_id"].(string)
	if st != 200 || id == "" {
		t.Fatalf("create: %d %v", st, env)
	}
	ts.exec(t, map[string]any{"language": "python", "code": "open('/tmp/w2/a.txt', 'w').write('a')"})
	st, env = ts.call(t, "POST", "/v2/fs/watch/"+id+"/poll", map[string]any{"cursor": 0, "timeout": 30})
	evs, _ := env["data"].(map[string]any)["events"].([]any)
	if st != 200 || len(evs) == 0 || evs[0].(map[string]any)["relative_path"] != "a.txt" {
		t.Fatalf("poll: %d %v", st, env)
	}
	if st, env := ts.call(t, "POST", "/v2/fs/watch", map[string]any{"path": "/tmp/w2", "debounce": 1}); st != 422 || !strings.Contains(env["message"].(string), "debounce") {
		t.Errorf("a bad debounce: %d %v", st, env)
	}
	if st, _ := ts.call(t, "DELETE", "/v2/fs/watch/"+id, nil); st != 200 {
		t.Errorf("delete: %d", st)
	}
}

// TestWSWatchFiles: the WebSocket's watch_files streams file_change
// messages of what code writes, shares the tenant's watcher cap with the
// routes (it is listed there), and unwatch_files stops it.
func TestWSWatchFiles(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	if st, env, _ := ts.exec(t, map[string]any{"language": "python", "code": "import os; os.makedirs('/tmp/wsw', exist_ok=True)"}); st != 200 || env["success"] != true {
		t.Fatalf("mkdir: %d %v", st, env)
	}
	c := dialWS(t, ts, nil)
	sendJSON(t, c, map[string]any{"type": "watch_files", "id": "f1", "path": "/tmp/nowhere"})
	if m := readJSON(t, c, 30*time.Second); m.typ() != "error" || m.m["status"] != 404.0 {
		t.Fatalf("a missing folder: %v", m.m)
	}
	sendJSON(t, c, map[string]any{"type": "watch_files", "id": "f1", "path": "/tmp/wsw", "debounce": 50})
	if m := readJSON(t, c, 30*time.Second); m.typ() != "watch_started" || m.id() != "f1" {
		t.Fatalf("watch_files answered %v", m.m)
	}
	if st, env := ts.call(t, "GET", "/v1/file/watch", nil); st != 200 || env["count"] != 1.0 {
		t.Errorf("the socket's watcher is not listed: %d %v", st, env)
	}
	ts.exec(t, map[string]any{"language": "python", "code": "open('/tmp/wsw/x.txt', 'w').write('x')"})
	for {
		m := readJSON(t, c, time.Minute)
		if m.typ() != "file_change" {
			continue
		}
		if ev, _ := m.m["event"].(map[string]any); m.id() != "f1" || ev["relative_path"] != "x.txt" || ev["type"] != "create" {
			t.Fatalf("file_change %v", m.m)
		}
		break
	}
	sendJSON(t, c, map[string]any{"type": "unwatch_files", "id": "f1"})
	for m := readJSON(t, c, 30*time.Second); m.typ() != "ok"; m = readJSON(t, c, 30*time.Second) {
	}
	if st, env := ts.call(t, "GET", "/v1/file/watch", nil); st != 200 || env["count"] != 0.0 {
		t.Errorf("after unwatch_files: %d %v", st, env)
	}
}
