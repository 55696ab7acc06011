package gateway

import (
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/goccy/go-json"

	"github.com/aiod/aiod/gateway/jupyterapi"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// jUUIDRE matches a kernel id as jupyter_server requires it.
var jUUIDRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func getJSON(t *testing.T, url string, want int, v any) {
	t.Helper()
	st, b := httpDo(t, "GET", url, "", "")
	if st != want {
		t.Fatalf("GET %s: %d %s (want %d)", url, st, b, want)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, b)
		}
	}
}

// kernelWS is a notebook-style client of /api/kernels/{id}/channels.
type kernelWS struct {
	t       *testing.T
	c       *websocket.Conn
	v1      bool
	session string
}

func dialKernel(t *testing.T, ts *testServer, id string, v1 bool) *kernelWS {
	t.Helper()
	opts := &websocket.DialOptions{}
	if v1 {
		opts.Subprotocols = []string{jupyter.SubprotocolV1}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, ts.wsURL("/api/kernels/"+id+"/channels?session_id=nb"), opts)
	if err != nil {
		t.Fatalf("dial channels: %v", err)
	}
	c.SetReadLimit(64 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	if got := c.Subprotocol(); (got == jupyter.SubprotocolV1) != v1 {
		t.Fatalf("subprotocol %q", got)
	}
	return &kernelWS{t: t, c: c, v1: v1, session: jupyter.NewID()}
}

// live waits until the server watches the kernel for k. It does so once
// the upgrade is done, which a loaded machine can delay past what a test
// does next: a reply to the socket's own request says it is watching.
// The kernel must answer kernel_info_request (a stub does not).
func (k *kernelWS) live() *kernelWS {
	k.t.Helper()
	info := k.send("shell", "kernel_info_request", map[string]any{})
	k.until(time.Minute, func(m *jupyter.Message) bool {
		return m.Header.MsgType == "kernel_info_reply" && m.Parent.MsgID == info
	})
	return k
}

func (k *kernelWS) send(channel, msgType string, content any) string {
	k.t.Helper()
	id := jupyter.NewID()
	b, _ := json.Marshal(content)
	m := &jupyter.Message{Channel: channel, Header: jupyter.NewHeader(k.session, id, msgType), Content: b}
	var typ websocket.MessageType
	var raw []byte
	if k.v1 {
		typ = websocket.MessageBinary
		raw, _ = jupyter.EncodeV1(m)
	} else {
		var bin bool
		raw, bin, _ = jupyter.EncodeLegacy(m)
		typ = websocket.MessageText
		if bin {
			typ = websocket.MessageBinary
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.c.Write(ctx, typ, raw); err != nil {
		k.t.Fatalf("write: %v", err)
	}
	return id
}

func (k *kernelWS) recv(within time.Duration) (*jupyter.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	typ, b, err := k.c.Read(ctx)
	if err != nil {
		return nil, err
	}
	if k.v1 {
		if typ != websocket.MessageBinary {
			k.t.Fatalf("v1 socket got a text message")
		}
		return jupyter.DecodeV1(b)
	}
	return jupyter.DecodeLegacy(b, typ == websocket.MessageBinary)
}

// until reads until match returns true, failing after within.
func (k *kernelWS) until(within time.Duration, match func(m *jupyter.Message) bool) []*jupyter.Message {
	k.t.Helper()
	deadline := time.Now().Add(within)
	var seen []*jupyter.Message
	for {
		m, err := k.recv(time.Until(deadline))
		if err != nil {
			k.t.Fatalf("read: %v after %d messages: %s", err, len(seen), kerneltest.Summary(seen))
		}
		seen = append(seen, m)
		if match(m) {
			return seen
		}
	}
}

func state(m *jupyter.Message) string {
	var c struct {
		S string `json:"execution_state"`
	}
	_ = json.Unmarshal(m.Content, &c)
	return c.S
}

// A REST session's kernel is listed by the kernels API, a notebook socket
// attaches to it and sees the agent's executions, hears "dead" when the
// kernel dies, and is closed when the session is deleted.
func TestJupyterKernelsAPIShowsRESTSessions(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	if _, env, _ := ts.exec(t, map[string]any{"language": "python", "code": "a = 1", "session_id": "agent-1"}); env["success"] != true {
		t.Fatalf("setup: %v", env)
	}
	var list []kernelModel
	getJSON(t, ts.URL+"/api/kernels", 200, &list)
	if len(list) != 1 || list[0].SessionID != "agent-1" || list[0].Language != "python" || list[0].Name != "python3" {
		t.Fatalf("kernels: %+v", list)
	}
	km := list[0]
	if !jUUIDRE.MatchString(km.ID) || km.ExecutionState != "idle" ||
		!regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`).MatchString(km.LastActivity) {
		t.Fatalf("model: %+v", km)
	}
	for _, v1 := range []bool{true, false} {
		k := dialKernel(t, ts, km.ID, v1)
		// Own requests are answered on shell.
		infoID := k.send("shell", "kernel_info_request", map[string]any{})
		k.until(30*time.Second, func(m *jupyter.Message) bool {
			return m.Channel == "shell" && m.Parent.MsgID == infoID && m.Header.MsgType == "kernel_info_reply"
		})
		var one kernelModel
		getJSON(t, ts.URL+"/api/kernels/"+km.ID, 200, &one)
		if one.Connections != 1 {
			t.Fatalf("connections = %d", one.Connections)
		}
		// The agent's REST execution shows on the notebook's iopub, its shell
		// reply does not.
		answered := make(chan map[string]any, 1)
		go func() {
			_, env, _ := ts.exec(t, map[string]any{"language": "python", "code": "print(a + 1)", "session_id": "agent-1"})
			answered <- env
		}()
		// ipykernel may send one print as several stream messages ("2",
		// then "\n", when its output thread runs between the two writes).
		var printed strings.Builder
		seen := k.until(time.Minute, func(m *jupyter.Message) bool {
			if m.Channel == "iopub" && m.Header.MsgType == "stream" {
				printed.WriteString(kerneltest.Field(m, "text"))
			}
			return strings.Contains(printed.String(), "2\n")
		})
		k.until(time.Minute, func(m *jupyter.Message) bool { return m.Header.MsgType == "status" && state(m) == "idle" })
		if env := <-answered; env["success"] != true {
			t.Fatalf("the agent's REST execution: %v", env)
		}
		for _, m := range seen {
			if m.Channel == "shell" && m.Parent.MsgID != infoID {
				t.Fatalf("another client's shell reply reached the notebook: %+v", m.Header)
			}
		}
		_ = k.c.Close(websocket.StatusNormalClosure, "")
		// The server counts the socket out once its close is done, which on
		// a loaded machine may come after the next socket is counted in.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			var m kernelModel
			getJSON(t, ts.URL+"/api/kernels/"+km.ID, 200, &m)
			if m.Connections == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("connections = %d a minute after the notebook's socket closed", m.Connections)
			}
		}
	}

	// Death is announced.
	k := dialKernel(t, ts, km.ID, false).live()
	pid := ts.Registry().Get("default", "python", "agent-1").Runtime().Info().PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	k.until(30*time.Second, func(m *jupyter.Message) bool { return m.Header.MsgType == "status" && state(m) == "dead" })
	var dead kernelModel
	getJSON(t, ts.URL+"/api/kernels/"+km.ID, 200, &dead)
	if dead.ExecutionState != "dead" {
		t.Fatalf("model after death: %+v", dead)
	}
	// The next REST call starts a fresh kernel, and the notebook sees it.
	if _, env, _ := ts.exec(t, map[string]any{"language": "python", "code": "print('fresh')", "session_id": "agent-1"}); env["success"] != true {
		t.Fatalf("REST after the kernel died: %v", env)
	}
	k.until(time.Minute, func(m *jupyter.Message) bool {
		return m.Header.MsgType == "stream" && strings.Contains(string(m.Content), "fresh")
	})
	var alive kernelModel
	getJSON(t, ts.URL+"/api/kernels/"+km.ID, 200, &alive)
	if alive.ExecutionState == "dead" {
		t.Fatalf("model after a fresh kernel started: %+v", alive)
	}
	// Deleting the session closes the socket and the kernel is gone.
	if st, _ := ts.call(t, "DELETE", "/v2/code/sessions/agent-1", nil); st != 200 {
		t.Fatalf("delete session: %d", st)
	}
	for {
		_, err := k.recv(30 * time.Second)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Fatalf("socket after delete: %v", err)
			}
			break
		}
	}
	getJSON(t, ts.URL+"/api/kernels/"+km.ID, 404, nil)
}

// A kernel started through the API is a session REST can drive, under the
// kernel id; the kernelspec routes and errors answer as Jupyter's do.
func TestJupyterKernelStartedByAPIIsARESTSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	var root map[string]any
	getJSON(t, ts.URL+"/api", 200, &root)
	if root["version"] == nil {
		t.Fatalf("/api: %v", root)
	}
	var specs struct {
		Default     string `json:"default"`
		Kernelspecs map[string]struct {
			Name      string         `json:"name"`
			Spec      map[string]any `json:"spec"`
			Resources map[string]any `json:"resources"`
		} `json:"kernelspecs"`
	}
	getJSON(t, ts.URL+"/api/kernelspecs", 200, &specs)
	py, ok := specs.Kernelspecs[specs.Default]
	if specs.Default != "python3" || !ok || py.Name != "python3" || py.Spec["language"] != "python" || py.Spec["argv"] == nil || py.Resources == nil {
		t.Fatalf("kernelspecs: %+v", specs)
	}
	getJSON(t, ts.URL+"/api/kernelspecs/python3", 200, nil)
	getJSON(t, ts.URL+"/api/kernelspecs/nope", 404, nil)
	if st, b := httpDo(t, "POST", ts.URL+"/api/kernels", "", `{"name":"nope"}`); st != 404 {
		t.Fatalf("start unknown spec: %d %s", st, b)
	}
	if st, b := httpDo(t, "POST", ts.URL+"/api/kernels", "", `[`); st != 400 {
		t.Fatalf("start with bad body: %d %s", st, b)
	}

	st, b := httpDo(t, "POST", ts.URL+"/api/kernels", "", `{"name":"python3","env":{"KERNEL_MARK":"m1"}}`)
	var km kernelModel
	if st != 201 || json.Unmarshal(b, &km) != nil || km.ID != km.SessionID || !jUUIDRE.MatchString(km.ID) {
		t.Fatalf("start kernel: %d %s", st, b)
	}
	_, env, data := ts.exec(t, map[string]any{"language": "python", "session_id": km.ID,
		"code": "import os\nprint(os.environ.get('KERNEL_MARK'))"})
	if env["success"] != true || data["stdout"] != "m1\n" {
		t.Fatalf("REST on the API's kernel: %v", env)
	}
	for _, p := range []string{"/interrupt", "/restart"} {
		if st, b := httpDo(t, "POST", ts.URL+"/api/kernels/no-such"+p, "", ""); st != 404 {
			t.Fatalf("POST %s on an unknown kernel: %d %s", p, st, b)
		}
	}
	if st, _ := httpDo(t, "POST", ts.URL+"/api/kernels/"+km.ID+"/interrupt", "", ""); st != 204 {
		t.Fatalf("interrupt: %d", st)
	}
	if st, _ := httpDo(t, "DELETE", ts.URL+"/api/kernels/"+km.ID, "", ""); st != 204 {
		t.Fatalf("delete: %d", st)
	}
	getJSON(t, ts.URL+"/api/kernels/"+km.ID, 404, nil)
	if st, _ := httpDo(t, "DELETE", ts.URL+"/api/kernels/"+km.ID, "", ""); st != 404 {
		t.Fatalf("second delete: %d", st)
	}
	if ts.Registry().Len() != 0 {
		t.Fatalf("sessions left: %d", ts.Registry().Len())
	}
}

// A channels socket is told when its kernel changes: the death of a kernel
// a restart started a moment ago is announced, once per death, and a
// restart (which closes the old kernel, no crash) is not announced as one.
// How soon is the monitor's design (it waits on the session's change
// channel, it does not poll) and is logged here, not asserted: a wall-clock
// bound failed on a loaded machine (736 ms).
func TestJupyterChannelsNoticeRestartAndDeathPromptly(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	sess, started := stubSession(t, ts, "stub-kernel", newStubRuntime)
	<-started
	k := dialKernel(t, ts, sess.KernelID, false)
	isDead := func(m *jupyter.Message) bool { return m.Header.MsgType == "status" && state(m) == "dead" }
	for i := range 5 {
		if _, err := sess.Restart(t.Context(), "a test"); err != nil {
			t.Fatal(err)
		}
		rt := <-started
		died := time.Now()
		rt.die()
		seen := k.until(30*time.Second, isDead)
		t.Logf("restart %d: the death was announced %s after it happened", i+1, time.Since(died))
		for _, m := range seen[:len(seen)-1] {
			if isDead(m) {
				t.Fatalf("restart %d: \"dead\" announced twice, or for the restart itself: %d messages %v", i+1, len(seen), seen)
			}
		}
	}
	// One more restart, announced "restarting" then "idle": no late "dead"
	// of the last kernel comes before or between them.
	if _, err := sess.Restart(t.Context(), "a test"); err != nil {
		t.Fatal(err)
	}
	<-started
	seen := k.until(30*time.Second, func(m *jupyter.Message) bool { return m.Header.MsgType == "status" && state(m) == "idle" })
	for _, m := range seen {
		if isDead(m) {
			t.Fatalf("a \"dead\" after the last restart: %v", seen)
		}
	}
}

// kernelModel is the kernels API's model, as the tests read it.
type kernelModel = jupyterapi.KernelModel

// A channels socket stays open and answers pings while its kernel starts
// again (the reader used to wait for the start to send a message on, and a
// start of more than a ping's timeout cut the socket), and what the client
// sent meanwhile reaches the new kernel.
func TestJupyterChannelsReadWhileTheKernelStarts(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	release := make(chan struct{})
	sent := make(chan *jupyter.Message, 4)
	first := true
	sess, started := stubSession(t, ts, "slow-start", func() *stubRuntime {
		rt := newStubRuntime()
		rt.sent = sent
		if !first {
			<-release // the restarted kernel takes its time
		}
		first = false
		return rt
	})
	rt := <-started
	k := dialKernel(t, ts, sess.KernelID, true)
	rt.die()
	id := k.send("shell", "kernel_info_request", map[string]any{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	go func() { // reads, so that the client sees the pongs
		for {
			if _, _, err := k.c.Read(ctx); err != nil {
				return
			}
		}
	}()
	for range 3 {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		err := k.c.Ping(pctx)
		pcancel()
		if err != nil {
			close(release)
			t.Fatalf("ping while the kernel starts: %v", err)
		}
	}
	close(release)
	select {
	case m := <-sent:
		if m.Header.MsgID != id {
			t.Fatalf("the new kernel got %s, want the client's %s", m.Header.MsgID, id)
		}
	case <-ctx.Done():
		t.Fatal("the message sent while the kernel started never reached it")
	}
}
