package main

// What real clients and careful users tripped on (issue 26), each against
// the real binary.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/remote/remotetest"
)

// walkthroughModules is a Python program that prints, one a line, the
// modules outside the standard library that the README's walkthrough
// (examples/walkthrough.py and the helper it imports) imports, and the
// file each one loads from.
const walkthroughModules = `
import ast, importlib, os, sys
here = sys.argv[1]
local = {os.path.splitext(f)[0] for f in os.listdir(here) if f.endswith(".py")}
seen = set()
for name in ("walkthrough.py", "aio.py"):
    tree = ast.parse(open(os.path.join(here, name)).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            mods = [node.module]
        else:
            continue
        for m in mods:
            top = m.split(".")[0]
            if top in sys.stdlib_module_names or top in local or top in seen:
                continue
            seen.add(top)
            print(top, importlib.import_module(top).__file__)
`

// Item 11: what make run installs (.ci/deps.sh run) covers every module
// the README's walkthrough imports: each one's file belongs to a Debian
// package on that list.
func TestMakeRunInstallsWhatTheWalkthroughImports(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := exec.CommandContext(ctx, "bash", "../../.ci/deps.sh", "list", "run").Output()
	if err != nil {
		t.Fatalf(".ci/deps.sh list run: %v", err)
	}
	run := map[string]bool{}
	for _, p := range strings.Fields(string(list)) {
		run[p] = true
	}
	out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", walkthroughModules, "../../examples").CombinedOutput()
	if err != nil {
		t.Fatalf("the walkthrough's imports: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("the walkthrough imports nothing outside the standard library? (expected httpx at least)")
	}
	for _, line := range lines {
		mod, file, _ := strings.Cut(line, " ")
		owner, err := exec.CommandContext(ctx, "dpkg", "-S", file).Output()
		if err != nil {
			t.Errorf("module %s (%s) belongs to no Debian package: %v", mod, file, err)
			continue
		}
		pkg, _, _ := strings.Cut(strings.TrimSpace(string(owner)), ":")
		if !run[pkg] {
			t.Errorf("the walkthrough imports %s from Debian's %s, which `make run` (.ci/deps.sh run) does not install: %v", mod, pkg, strings.Fields(string(list)))
		}
	}
}

// fmtStringer is a server's log, printed when a client fails.
type fmtStringer interface{ String() string }

type stringer func() string

func (f stringer) String() string { return f() }

// runGatewayNotebook runs testdata/nbclient_gateway.py against base and
// returns each cell's outputs.
func runGatewayNotebook(t *testing.T, base, token string, logs fmtStringer) []any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	args := []string{"testdata/nbclient_gateway.py", base}
	if token != "" {
		args = append(args, token)
	}
	out, err := exec.CommandContext(ctx, remotetest.Python, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("nbclient through GatewayKernelManager against %s: %v\n%s\nserver:\n%s", base, err, ee.Stderr, logs)
		}
		t.Fatalf("nbclient through GatewayKernelManager against %s: %v\nserver:\n%s", base, err, logs)
	}
	var cells []any
	if err := json.Unmarshal(out, &cells); err != nil {
		t.Fatalf("nbclient's outputs: %v\n%s", err, out)
	}
	return cells
}

// Item 1: nbclient runs a two-cell notebook through jupyter_server 1.23's
// GatewayKernelManager (whose client sends no channel and a float
// header.date) against the binary, and gets the outputs Jupyter Server
// gives for the same notebook: the print's stream, and the DataFrame as
// text/html with its execution count.
func TestNbclientThroughGatewayKernelManager(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	got := runGatewayNotebook(t, d.url, "", d.stderr)
	if len(got) != 2 {
		t.Fatalf("cells: %v", got)
	}
	df, _ := got[1].([]any)
	if len(df) != 1 {
		t.Fatalf("the DataFrame cell's outputs: %v", got[1])
	}
	res, _ := df[0].(map[string]any)
	data, _ := res["data"].(map[string]any)
	if html, _ := data["text/html"].(string); res["output_type"] != "execute_result" || !strings.Contains(html, "<table") || !strings.Contains(html, "&lt;y&gt;") {
		t.Errorf("the DataFrame is not text/html: %v", res)
	}
	// jupyter_server 1.23's gateway client sends no credentials on the
	// channels WebSocket, so the reference server runs without a token.
	js := remotetest.Start(t, "--ServerApp.token=", "--ServerApp.disable_check_xsrf=True")
	want := runGatewayNotebook(t, js.URL, "", stringer(js.Output))
	if !reflect.DeepEqual(got, want) {
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		t.Errorf("outputs through aiod differ from Jupyter Server's:\n aiod: %s\n jupyter_server: %s", gb, wb)
	}
	if strings.Contains(d.stderr.String(), "refused") {
		t.Errorf("aiod refused a message of the gateway client:\n%s", d.stderr)
	}
}

// openChannels opens a kernel (POST /api/kernels) and its channels socket
// in the legacy framing.
func openChannels(t *testing.T, d *daemon) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := d.post(ctx, "/api/kernels", map[string]any{"name": "python3"})
	id, _ := a.body["id"].(string)
	if a.status != http.StatusCreated || id == "" {
		t.Fatalf("POST /api/kernels: %d %s", a.status, a.raw)
	}
	c, _, err := websocket.Dial(ctx, "ws"+d.url[len("http"):]+"/api/kernels/"+id+"/channels", nil)
	if err != nil {
		t.Fatalf("dial channels: %v", err)
	}
	c.SetReadLimit(64 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// replyTo reads until the shell reply parented to msgID, and returns it.
func replyTo(t *testing.T, c *websocket.Conn, msgID string) *jupyter.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("no reply to %s: %v", msgID, err)
		}
		m, err := jupyter.DecodeLegacy(b, typ == websocket.MessageBinary)
		if err != nil {
			t.Fatalf("aiod sent a message it cannot decode itself: %v", err)
		}
		if m.Channel != jupyter.IOPub && m.Parent.MsgID == msgID {
			return m
		}
	}
}

// Item 1: header.date may be a string, a number or null; a request aiod
// cannot take gets its reply with status error, a message that is no
// request closes the socket with 1007 and the reason; each is logged at
// warn level.
func TestChannelsAnswerEveryClientMessage(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	c := openChannels(t, d)
	write := func(raw string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Write(ctx, websocket.MessageText, []byte(raw)); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	msg := func(id, msgType, date, content string) string {
		return `{"header":{"msg_id":"` + id + `","session":"s26","username":"u","msg_type":"` + msgType + `","version":"5.3","date":` + date +
			`},"parent_header":{},"metadata":{},"content":` + content + `}`
	}
	for i, date := range []string{`"2026-12-02T00:00:00.000000Z"`, `1796169600.25`, `null`} {
		id := "info-" + string(rune('a'+i))
		write(msg(id, "kernel_info_request", date, `{}`))
		if r := replyTo(t, c, id); r.Header.MsgType != "kernel_info_reply" || !strings.Contains(string(r.Content), `"status":"ok"`) {
			t.Errorf("date %s: %s %s", date, r.Header.MsgType, r.Content)
		}
	}
	write(msg("bad-content", "execute_request", `1796169600`, `["print(1)"]`))
	r := replyTo(t, c, "bad-content")
	var content struct {
		Status, Ename, Evalue string
	}
	_ = json.Unmarshal(r.Content, &content)
	if r.Header.MsgType != "execute_reply" || r.Channel != jupyter.Shell || content.Status != "error" || content.Ename != "BadMessage" ||
		!strings.Contains(content.Evalue, "content") {
		t.Errorf("a bad execute_request's answer: %s %s %s", r.Channel, r.Header.MsgType, r.Content)
	}
	write(msg("wrong-channel", "kernel_info_request", `null`, `{}`)[:1] + `"channel":"iopub",` + msg("wrong-channel", "kernel_info_request", `null`, `{}`)[1:])
	if r := replyTo(t, c, "wrong-channel"); !strings.Contains(string(r.Content), `"status":"error"`) || !strings.Contains(string(r.Content), "iopub") {
		t.Errorf("a request on iopub: %s %s", r.Header.MsgType, r.Content)
	}
	write(`{"channel":"shell","header":{"msg_id":7,"msg_type":"execute_request"},"parent_header":{},"metadata":{},"content":{}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusInvalidFramePayloadData || !strings.Contains(err.Error(), "header") {
				t.Errorf("an unreadable header: %v, want a close with 1007 naming the header", err)
			}
			break
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(d.stderr.String(), "level=WARN msg=\"kernel websocket: ") < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := strings.Count(d.stderr.String(), "level=WARN msg=\"kernel websocket: "); n < 3 {
		t.Errorf("%d warn lines for 3 refused messages:\n%s", n, d.stderr)
	}
}

// Item 2: code with a NUL byte is refused with 422 naming the field code,
// on v2 (execute, complete) and on every v1 execute route, before anything
// runs.
func TestNULInCodeIsRefused(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := "x = 1\x00\nprint(x)"
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/v2/code/execute", map[string]any{"language": "python", "code": code}},
		{"/v2/code/complete", map[string]any{"language": "python", "code": code, "cursor_pos": 1}},
		{"/v1/code/execute", map[string]any{"language": "python", "code": code}},
		{"/v1/jupyter/execute", map[string]any{"code": code}},
		{"/v1/nodejs/execute", map[string]any{"code": "console.log(1)\x00"}},
	} {
		a := d.post(ctx, c.path, c.body)
		if a.status != http.StatusUnprocessableEntity || !strings.Contains(a.raw, "code") || !strings.Contains(a.raw, "NUL") {
			t.Errorf("%s with a NUL in code: %d %s, want 422 naming code", c.path, a.status, a.raw)
		}
	}
}

// Item 2: a real ipykernel that goes idle without its execute_reply (the
// code drops its own reply, as ipykernel 6.17 does for a NUL) is not
// success: error, error_kind no_reply, after the 5 s grace, with the
// outputs it sent.
func TestLostReplyIsAnError(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	drop := `
k = get_ipython().kernel
orig = k.session.send
def send(stream, msg_or_type, *args, **kwargs):
    if msg_or_type == "execute_reply":
        k.session.send = orig
        return None
    return orig(stream, msg_or_type, *args, **kwargs)
k.session.send = send
print("ran")
`
	a := d.post(ctx, "/v2/code/execute", map[string]any{"language": "python", "session_id": "noreply", "code": drop, "timeout": 60})
	data, _ := a.body["data"].(map[string]any)
	if a.status != http.StatusOK || a.body["success"] != false || data["status"] != "error" || data["error_kind"] != "no_reply" ||
		data["stdout"] != "ran\n" || !strings.Contains(a.raw, "sent no reply") {
		t.Fatalf("a lost reply: %d %s", a.status, a.raw)
	}
	// The session goes on.
	if got := d.execute(ctx, "noreply", "print(40 + 2)", 30); got.Stdout != "42\n" {
		t.Errorf("after a lost reply: %+v", got)
	}
}

// Item 3: a timeout shorter than the code's run (1 ms) reports what
// happened: code that ran to its end before the interrupt reached it is ok,
// with its execute_result and execution_count, and the message says the
// timeout passed; code the interrupt stopped is a timeout.
func TestTinyTimeoutReportsWhatHappened(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	d.execute(ctx, "tiny", "x = 1", 30) // the kernel is up
	a := d.post(ctx, "/v2/code/execute", map[string]any{"language": "python", "session_id": "tiny", "code": "1+1", "timeout": 0.001})
	data, _ := a.body["data"].(map[string]any)
	outs, _ := data["outputs"].([]any)
	switch data["status"] {
	case "ok":
		// The code's result, and nothing else but the KeyboardInterrupt
		// that IPython prints when the interrupt lands in its own code after
		// the result.
		results := 0
		for _, o := range outs {
			o, _ := o.(map[string]any)
			switch {
			case o["output_type"] == "execute_result":
				results++
			case o["output_type"] == "stream" && o["name"] == "stderr" && strings.TrimSpace(asString(o["text"])) == "KeyboardInterrupt":
			default:
				t.Errorf("ok after a 1 ms timeout, with an output besides the result: %v", o)
			}
		}
		if data["execution_count"] == nil || results != 1 || !strings.Contains(a.raw, `"text/plain":"2"`) || !strings.Contains(a.raw, "run to its end") {
			t.Errorf("ok after a 1 ms timeout: %s", a.raw)
		}
	case "timeout":
		// The interrupt landed first: nothing may claim the code finished.
		if strings.Contains(a.raw, `"execute_result"`) {
			t.Errorf("a timeout with the finished result: %s", a.raw)
		}
	default:
		t.Errorf("1 ms timeout: %s", a.raw)
	}
	a = d.post(ctx, "/v2/code/execute", map[string]any{"language": "python", "session_id": "tiny", "code": "import time; time.sleep(5)", "timeout": 0.001})
	if data, _ := a.body["data"].(map[string]any); data["status"] != "timeout" || data["error_kind"] != "timeout" {
		t.Errorf("a sleep after a 1 ms timeout: %s", a.raw)
	}
}

// Item 9: a timeout too large for a float64 is a 422 that says it is out
// of range, on v2 and v1.
func TestHugeTimeoutIsOutOfRange(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, path := range []string{"/v2/code/execute", "/v1/code/execute"} {
		a := d.postRaw(ctx, path, `{"language":"python","code":"1","timeout":1e309}`)
		if a.status != http.StatusUnprocessableEntity || !strings.Contains(a.raw, "timeout") || !strings.Contains(a.raw, "out of range") ||
			strings.Contains(a.raw, "got a number") {
			t.Errorf("%s with timeout 1e309: %d %s", path, a.status, a.raw)
		}
	}
}

// postRaw sends body as it is and returns the answer whatever its status.
func (d *daemon) postRaw(ctx context.Context, path, body string) rawAnswer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+path, strings.NewReader(body))
	if err != nil {
		return rawAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	a := rawAnswer{status: resp.StatusCode, retry: resp.Header.Get("Retry-After"), raw: string(raw), err: err}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

// getJSON GETs path and decodes the answer, whatever its status.
func (d *daemon) getJSON(ctx context.Context, path string) (int, map[string]any) {
	d.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+path, nil)
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// Item 4: GET /v2/code/executions/{id} gives every field one type
// whatever the state: last_seq (the seq to resume after) is a number queued, running and done;
// outputs is a list in every state: the outputs so far.
func TestExecutionFieldsKeepTheirTypes(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	d.execute(ctx, "types", "x = 1", 30)
	done := make(chan rawAnswer, 2)
	go func() {
		done <- d.post(ctx, "/v2/code/execute", map[string]any{"language": "python", "session_id": "types", "execution_id": "types-1",
			"code": "import time\nprint('a', flush=True)\ntime.sleep(3)\nprint('b')", "timeout": 60})
	}()
	check := func(data map[string]any, state string) {
		t.Helper()
		if data["state"] != state {
			return
		}
		if _, ok := data["last_seq"].(float64); !ok {
			t.Errorf("%s: last_seq is %T (%v), want a number", state, data["last_seq"], data["last_seq"])
		}
		if o, ok := data["outputs"].([]any); !ok {
			t.Errorf("%s: outputs is %T (%v), want a list in every state (issue 42)", state, data["outputs"], data["outputs"])
		} else if state == "running" && data["last_seq"] == float64(1) && len(o) != 1 {
			t.Errorf("running after one output: outputs %v", o)
		}
	}
	seen := map[string]bool{}
	for deadline := time.Now().Add(30 * time.Second); !seen["running"] && time.Now().Before(deadline); {
		if st, env := d.getJSON(ctx, "/v2/code/executions/types-1"); st == http.StatusOK {
			data, _ := env["data"].(map[string]any)
			st, _ := data["state"].(string)
			seen[st] = true
			check(data, st)
			if n, _ := data["last_seq"].(float64); st == "running" && n < 1 {
				seen["running"] = false // until the first output is in
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !seen["running"] {
		t.Fatal("never saw the execution running with an output")
	}
	// One queued behind it.
	go func() {
		done <- d.post(ctx, "/v2/code/execute", map[string]any{"language": "python", "session_id": "types", "execution_id": "types-2", "code": "print('c')"})
	}()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st, env := d.getJSON(ctx, "/v2/code/executions/types-2"); st == http.StatusOK {
			data, _ := env["data"].(map[string]any)
			check(data, "queued")
			break
		}
	}
	_, env := d.getJSON(ctx, "/v2/code/executions/types-1?wait=30")
	data, _ := env["data"].(map[string]any)
	check(data, "done")
	if outs, _ := data["outputs"].([]any); data["state"] != "done" || data["last_seq"] != float64(2) || len(outs) == 0 {
		t.Errorf("done: %v", env)
	}
	<-done
	<-done
}

// Item 5: every NDJSON line has a type, the last one "result" (the SSE
// event's name), and the SSE result's data is the same object.
func TestStreamsTypeEveryLine(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, accept := range []string{"application/x-ndjson", "text/event-stream"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v2/code/execute",
			strings.NewReader(`{"language":"python","code":"print(1)\nprint(2)"}`))
		req.Header.Set("Accept", accept)
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var objs []map[string]any
		for _, line := range strings.Split(string(raw), "\n") {
			if accept == "text/event-stream" {
				var ok bool
				if line, ok = strings.CutPrefix(line, "data: "); !ok {
					continue
				}
			}
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%s line %q: %v", accept, line, err)
			}
			objs = append(objs, m)
		}
		if len(objs) < 2 {
			t.Fatalf("%s: %s", accept, raw)
		}
		for i, m := range objs {
			if _, ok := m["type"].(string); !ok {
				t.Errorf("%s: object %d has no type: %v", accept, i, m)
			}
		}
		last := objs[len(objs)-1]
		if data, _ := last["data"].(map[string]any); last["type"] != "result" || last["success"] != true || data["stdout"] != "1\n2\n" {
			t.Errorf("%s: the last object: %v", accept, last)
		}
	}
}

// Item 6: over --max-sessions, a streamed execute is refused in HTTP
// (429, Retry-After, the JSON envelope) before any stream starts, and a
// WebSocket execute gets the refusal as its only answer, with no accepted
// before it.
func TestRefusedStreamIsAnHTTPRefusal(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--max-sessions", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d.execute(ctx, "holds-the-slot", "x = 1", 30)
	for _, c := range []struct{ accept, body string }{
		{"text/event-stream", `{"language":"python","code":"print(1)"}`},
		{"application/x-ndjson", `{"language":"python","code":"print(1)","session_id":"another"}`},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v2/code/execute", strings.NewReader(c.body))
		req.Header.Set("Accept", c.accept)
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !strings.Contains(string(raw), `"error_kind":"admission"`) {
			t.Errorf("%s over the cap: %d Retry-After=%q %s %s", c.accept, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), raw)
		}
	}
	ws, _, err := websocket.Dial(ctx, "ws"+d.url[len("http"):]+"/v2/code/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"execute","id":1,"language":"python","code":"print(1)","session_id":"third"}`)); err != nil {
		t.Fatal(err)
	}
	_, b, err := ws.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if m["type"] != "error" || m["status"] != float64(429) || m["error_kind"] != "admission" {
		t.Errorf("the WebSocket's first answer to a refused execute: %s", b)
	}
	// The slot's own session still streams.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v2/code/execute",
		strings.NewReader(`{"language":"python","code":"print(x)","session_id":"holds-the-slot"}`))
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"type":"result"`) {
		t.Errorf("a stream in the live session: %d %s", resp.StatusCode, raw)
	}
}

// Item 7: behind a token, a browser opening / gets a small sign-in page
// (401, HTML, a token field that opens /?token=), and the page with the
// token; curl and the API keep the JSON 401.
func TestTokenPageSignIn(t *testing.T) {
	t.Parallel()
	d := startDaemonEnv(t, []string{"AIO_TOKEN=tok-26-secret"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	get := func(path, accept string) (*http.Response, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	browser := "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	resp, body := get("/", browser)
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, `name="token"`) || !strings.Contains(body, "/?token=") || strings.Contains(body, `\u003c`) ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("a browser at / without the token: %d %s %v\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header, body)
	}
	if resp, body := get("/?token=wrong", browser); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) {
		t.Errorf("a browser at / with a wrong token: %d %s", resp.StatusCode, body)
	}
	if resp, body := get("/?token=tok-26-secret", browser); resp.StatusCode != http.StatusOK || !strings.Contains(body, "static/") {
		t.Errorf("a browser at / with the token: %d %.300s", resp.StatusCode, body)
	}
	for _, c := range []struct{ path, accept string }{{"/", ""}, {"/", "*/*"}, {"/v2/code/sessions", browser}} {
		resp, body := get(c.path, c.accept)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
			!strings.Contains(body, "token or JWT") {
			t.Errorf("GET %s (Accept %q): %d %s %s", c.path, c.accept, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}

// Item 8: JSON answers keep <, > and & as they are (code, outputs,
// tracebacks, messages), on REST, the streams, v1, the WebSocket and the
// 401; none carries \u003c, \u003e or \u0026.
func TestJSONAnswersDoNotEscapeHTML(t *testing.T) {
	t.Parallel()
	d := startDaemonEnv(t, []string{"AIO_TOKEN=tok-26"})
	d.token = "tok-26"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	escaped := func(what, raw string) {
		t.Helper()
		for _, e := range []string{`\u003c`, `\u003e`, `\u0026`} {
			if strings.Contains(raw, e) {
				t.Errorf("%s escapes HTML (%s): %.600s", what, e, raw)
				return
			}
		}
	}
	code := `print("<a & b>")` + "\n" + `raise ValueError("<x> & <y>")`
	a := d.post(ctx, "/v2/code/execute", map[string]any{"language": "python", "code": code, "session_id": "html", "execution_id": "html-1"})
	if !strings.Contains(a.raw, `print(\"<a & b>\")`) || !strings.Contains(a.raw, `<a & b>\n`) || !strings.Contains(a.raw, "ValueError: <x> & <y>") {
		t.Errorf("v2 execute: %s", a.raw)
	}
	escaped("v2 execute", a.raw)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/v2/code/executions/html-1", nil)
	req.Header.Set("Authorization", "Bearer tok-26")
	if resp, err := d.client.Do(req); err == nil {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		escaped("GET /v2/code/executions/{id}", string(raw))
	}
	for _, accept := range []string{"text/event-stream", "application/x-ndjson"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v2/code/execute", strings.NewReader(`{"language":"python","code":"print('<b>&')"}`))
		req.Header.Set("Accept", accept)
		req.Header.Set("Authorization", "Bearer tok-26")
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(raw), "<b>&") {
			t.Errorf("%s: %s", accept, raw)
		}
		escaped(accept, string(raw))
	}
	a = d.post(ctx, "/v1/code/execute", map[string]any{"language": "python", "code": "print('<c>&')"})
	if !strings.Contains(a.raw, "<c>&") {
		t.Errorf("v1: %s", a.raw)
	}
	escaped("v1 code execute", a.raw)
	a = d.post(ctx, "/v1/jupyter/execute", map[string]any{"code": "'<d>&'"})
	escaped("v1 jupyter execute", a.raw)
	d.token = ""
	a = d.post(ctx, "/v2/code/execute", map[string]any{"language": "python", "code": "1"})
	if a.status != http.StatusUnauthorized || !strings.Contains(a.raw, "Bearer <token or JWT>") {
		t.Errorf("401: %d %s", a.status, a.raw)
	}
	escaped("401", a.raw)
	ws, _, err := websocket.Dial(ctx, "ws"+d.url[len("http"):]+"/v2/code/ws?token=tok-26", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"execute","id":1,"language":"python","code":"print('<e>&')"}`))
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		escaped("WebSocket", string(b))
		if strings.Contains(string(b), `"type":"result"`) {
			if !strings.Contains(string(b), "<e>&") {
				t.Errorf("WebSocket result: %s", b)
			}
			break
		}
	}
}

// mcpPost sends one JSON-RPC message to /mcp and returns the answer's
// body (an SSE stream or JSON) and its session header.
func mcpPost(t *testing.T, d *daemon, ctx context.Context, session, body string) (string, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("POST /mcp %s: %d %s", body, resp.StatusCode, raw)
	}
	return string(raw), resp.Header.Get("Mcp-Session-Id")
}

// Item 8, MCP: a tool's answer keeps <, > and & too.
func TestMCPAnswersDoNotEscapeHTML(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, sid := mcpPost(t, d, ctx, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	mcpPost(t, d, ctx, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	raw, _ := mcpPost(t, d, ctx, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"python","code":"print('<m> & <n>')"}}}`)
	if !strings.Contains(raw, "<m> & <n>") {
		t.Errorf("MCP execute_code: %s", raw)
	}
	for _, e := range []string{`\u003c`, `\u003e`, `\u0026`} {
		if strings.Contains(raw, e) {
			t.Errorf("MCP escapes HTML (%s): %s", e, raw)
		}
	}
}

// Item 10: the binary's own /openapi.json declares, on each route, the
// statuses the binary answers there (not only through default): each
// answer provoked below is looked up in the document it serves.
func TestOpenAPIDeclaresTheStatusesTheBinaryAnswers(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--max-sessions", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, doc := d.getJSON(ctx, "/openapi.json")
	paths, _ := doc["paths"].(map[string]any)
	declared := func(method, path string, status int) bool {
		op, _ := paths[path].(map[string]any)[method].(map[string]any)
		rs, _ := op["responses"].(map[string]any)
		_, ok := rs[strconv.Itoa(status)]
		return ok
	}
	exec := "/v2/code/execute"
	d.execute(ctx, "one", "x = 1", 30)
	for _, c := range []struct {
		method, route string
		got           rawAnswer
	}{
		{"post", exec, d.postRaw(ctx, exec, `{"language":"python"}`)},
		{"post", exec, d.postRaw(ctx, exec, `{"language":"python","code":"1","session_id":"two"}`)},
		{"post", exec, d.postRaw(ctx, exec, `{"language":"python","code":"2","session_id":"one","execution_id":"`+d.lastExecID(ctx, "one")+`"}`)},
		{"post", exec, d.postRaw(ctx, exec, `{"language":"cobol","code":"1"}`)},
		{"post", "/v2/code/sessions/{id}/restart", d.postRaw(ctx, "/v2/code/sessions/nope/restart", `{}`)},
		{"post", "/v2/code/complete", d.postRaw(ctx, "/v2/code/complete", `{"language":"python"}`)},
	} {
		if c.got.status == http.StatusOK || c.got.status == 0 {
			t.Errorf("%s %s: %d %s, want a refusal", c.method, c.route, c.got.status, c.got.raw)
			continue
		}
		t.Logf("%s %s: %d", c.method, c.route, c.got.status)
		if !declared(c.method, c.route, c.got.status) {
			t.Errorf("%s %s answered %d (%s), which its /openapi.json does not declare", c.method, c.route, c.got.status, c.got.raw)
		}
	}
	for _, s := range []int{404, 409, 422, 429, 503} {
		if !declared("post", exec, s) {
			t.Errorf("POST %s does not declare %d", exec, s)
		}
	}
}

// lastExecID is the execution id of the session's last call.
func (d *daemon) lastExecID(ctx context.Context, sid string) string {
	a := d.post(ctx, "/v2/code/execute", map[string]any{"language": "python", "code": "y = 2", "session_id": sid})
	data, _ := a.body["data"].(map[string]any)
	id, _ := data["execution_id"].(string)
	return id
}

// asString is v if it is a string, else "".
func asString(v any) string {
	s, _ := v.(string)
	return s
}
