package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/coder/websocket"
	"github.com/goccy/go-json"
)

// wsURL turns the test server's URL into a ws:// URL for path.
func (ts *testServer) wsURL(path string) string {
	return "ws" + strings.TrimPrefix(ts.URL, "http") + path
}

// dialWS opens our protocol's socket; it is closed when the test ends.
func dialWS(t testing.TB, ts *testServer, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, ts.wsURL("/v2/code/ws"), opts)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial /v2/code/ws: %v (HTTP %d)", err, status)
	}
	c.SetReadLimit(256 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

func sendJSON(t testing.TB, c *websocket.Conn, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// wsMsg is one server message and when it arrived.
type wsMsg struct {
	m  map[string]any
	at time.Time
}

func (w wsMsg) typ() string { s, _ := w.m["type"].(string); return s }
func (w wsMsg) id() any     { return w.m["id"] }

func readJSON(t testing.TB, c *websocket.Conn, within time.Duration) wsMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("got a binary message: %q", b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("message is not JSON: %q", b)
	}
	return wsMsg{m, time.Now()}
}

// readUntil reads messages until one of type typ with id id arrives and
// returns all of them, that one last.
// readSkipAccepted reads the next message that is not an execution's
// acknowledgement ({"type":"accepted"}), checking that those name an id.
func readSkipAccepted(t testing.TB, c *websocket.Conn, within time.Duration) wsMsg {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		m := readJSON(t, c, time.Until(deadline))
		if m.typ() != "accepted" {
			return m
		}
		if id, _ := m.m["execution_id"].(string); id == "" {
			t.Fatalf("accepted without an execution_id: %v", m.m)
		}
	}
}

func readUntil(t testing.TB, c *websocket.Conn, typ string, id any, within time.Duration) []wsMsg {
	t.Helper()
	deadline := time.Now().Add(within)
	var out []wsMsg
	for {
		m := readJSON(t, c, time.Until(deadline))
		out = append(out, m)
		if m.typ() == typ && m.id() == id {
			return out
		}
	}
}

// threeLines prints three flushed lines, 0 to 2, and after the first waits
// (up to 60 s) for the file gate. A test that checks outputs arrive live
// makes gate when the first line reaches it: proof by cause, where a
// spread in time between the first and last output could be squeezed by
// a loaded machine. A stream held back until the code ended would never
// deliver the first line, and the code would end with a SystemExit that
// says so. Once gate exists, the code runs straight through. Each line is
// one write, flushed: print writes a line in parts, and the kernel's
// output thread, which flushes on a timer, could send them apart.
func threeLines(gate string) string {
	return fmt.Sprintf("import os, sys, time\nout = sys.stdout\nout.write('0\\n'); out.flush()\nfor _ in range(600):\n    if os.path.exists(%q):\n        break\n    time.sleep(0.1)\n"+
		"else:\n    raise SystemExit('the first line never reached the client')\nout.write('1\\n'); out.flush()\nout.write('2\\n'); out.flush()", gate)
}

// streamGate is a gate for code that waits on one (threeLines, a shell
// command) run as tenant: its path in the tenant's view (for the code)
// and on this host (for the test).
func streamGate(t *testing.T, ts *testServer, tenant string) (inView, onHost string) {
	t.Helper()
	inView = ts.viewDir(t, tenant) + "/first-line-seen"
	return inView, ts.hostPath(t, tenant, inView)
}

// openGate makes the gate at path, once.
func openGate(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatalf("make the gate: %v", err)
	}
}

// stripVolatile removes the fields that differ between two runs of the
// same code (queued_ms appears once a call waited a millisecond or more).
func stripVolatile(d map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range d {
		if k != "execution_count" && k != "execution_id" && k != "queued_ms" {
			out[k] = v
		}
	}
	if outs, ok := out["outputs"].([]any); ok {
		for _, o := range outs {
			if om, ok := o.(map[string]any); ok {
				delete(om, "execution_count")
			}
		}
	}
	return out
}

func mustJSONString(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// jlabDir returns gateway/testdata/jlab with its npm packages installed.
func jlabDir(t testing.TB) string {
	t.Helper()
	return kerneltest.NodeModules(t, "testdata/jlab", "@jupyterlab/services", "ws")
}

// httpDo sends a request with an optional token and returns status and body.
func httpDo(t testing.TB, method, url, token string, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// acceptedID reads the socket's next message, which must accept the
// execute request id, and returns the execution's id.
func acceptedID(t testing.TB, c *websocket.Conn, id string) string {
	t.Helper()
	m := readJSON(t, c, time.Minute)
	eid, _ := m.m["execution_id"].(string)
	if m.typ() != "accepted" || m.id() != id || eid == "" {
		t.Fatalf("want accepted for %s with an execution id, got %v", id, m.m)
	}
	return eid
}
