package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aiod/aiod/gateway/wsock"
)

// A cell printing three flushed lines streams three output messages, the
// first while the cell still runs (it waits for a file the test makes when
// that output arrives), then a result whose data equals the REST answer
// for the same code. A second execution runs on the same socket at the
// same time.
func TestWSStreamsOutputsLiveThenResultLikeREST(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	gate, hostGate := streamGate(t, ts, "default")
	code := threeLines(gate)
	c := dialWS(t, ts, nil)
	sendJSON(t, c, map[string]any{"type": "execute", "id": "three", "language": "python", "code": code})
	sendJSON(t, c, map[string]any{"type": "execute", "id": 7, "language": "python", "code": "print('other')", "session_id": "ws-other"})

	var outs []wsMsg
	var result, other map[string]any
	deadline := time.Now().Add(2 * time.Minute)
	for result == nil || other == nil {
		m := readJSON(t, c, time.Until(deadline))
		switch {
		case m.id() == "three" && m.typ() == "output":
			if result != nil {
				t.Fatal("output after result")
			}
			outs = append(outs, m)
			openGate(t, hostGate)
		case m.id() == "three" && m.typ() == "result":
			result = m.m
		case m.id() == float64(7) && m.typ() == "result":
			other = m.m
		case m.id() == float64(7) && m.typ() == "output":
		case m.typ() == "accepted" && m.m["execution_id"] != nil:
		default:
			t.Fatalf("unexpected message %v", m.m)
		}
	}
	if len(outs) != 3 {
		t.Fatalf("want 3 output messages (stream chunks not merged), got %d: %v", len(outs), outs)
	}
	for i, o := range outs {
		out := o.m["output"].(map[string]any)
		if out["output_type"] != "stream" || out["name"] != "stdout" || out["text"] != string(rune('0'+i))+"\n" || o.m["seq"] != float64(i+1) {
			t.Fatalf("output %d = %v", i, o.m)
		}
	}
	if other["success"] != true || other["data"].(map[string]any)["stdout"] != "other\n" {
		t.Fatalf("second execution: %v", other)
	}

	st, env, data := ts.exec(t, map[string]any{"language": "python", "code": code})
	if st != 200 {
		t.Fatalf("REST status %d %v", st, env)
	}
	if result["success"] != env["success"] || result["message"] != env["message"] {
		t.Fatalf("ws result %v %v, REST %v %v", result["success"], result["message"], env["success"], env["message"])
	}
	got, want := mustJSONString(t, stripVolatile(result["data"].(map[string]any))), mustJSONString(t, stripVolatile(data))
	if got != want {
		t.Fatalf("ws result data\n%s\nREST data\n%s", got, want)
	}
}

// A watcher sees a REST-started execution live: busy, each output as it is
// printed, idle, and the result (equal to the REST answer), all tagged
// with the execution's id.
func TestWSWatcherSeesRESTExecutionLive(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	if _, env, _ := ts.exec(t, map[string]any{"language": "python", "code": "x = 1", "session_id": "watched"}); env["success"] != true {
		t.Fatalf("setup: %v", env)
	}
	c := dialWS(t, ts, nil)
	sendJSON(t, c, map[string]any{"type": "watch", "id": "w", "session_id": "watched"})
	if m := readJSON(t, c, 10*time.Second); m.typ() != "ok" || m.id() != "w" {
		t.Fatalf("watch answer %v", m.m)
	}
	type rest struct{ env, data map[string]any }
	gate, hostGate := streamGate(t, ts, "default")
	restc := make(chan rest, 1)
	go func() {
		_, env, data := ts.exec(t, map[string]any{"language": "python", "code": threeLines(gate), "session_id": "watched"})
		restc <- rest{env, data}
	}()
	var seen []wsMsg
	var result wsMsg
	for result.m == nil {
		m := readJSON(t, c, time.Minute)
		if m.m["session_id"] != "watched" {
			t.Fatalf("watched message without the session: %v", m.m)
		}
		seen = append(seen, m)
		if m.typ() == "output" {
			openGate(t, hostGate) // the REST call cannot end before this
		}
		if m.typ() == "result" {
			result = m
		}
	}
	r := <-restc
	execID := result.id()
	if s, _ := execID.(string); len(s) != 36 {
		t.Fatalf("result id %v is not the execution's msg_id", execID)
	}
	var outs []wsMsg
	sawBusy, sawIdle := false, false
	for _, m := range seen {
		if m.id() != execID {
			t.Fatalf("message of another execution: %v", m.m)
		}
		switch m.typ() {
		case "status":
			sawBusy = sawBusy || m.m["state"] == "busy"
			sawIdle = sawIdle || m.m["state"] == "idle"
		case "output":
			outs = append(outs, m)
		}
	}
	if !sawBusy || !sawIdle || len(outs) != 3 {
		t.Fatalf("watcher saw busy=%v, idle=%v and %d outputs: %v", sawBusy, sawIdle, len(outs), seen)
	}
	got, want := mustJSONString(t, result.m["data"]), mustJSONString(t, r.data)
	if got != want || result.m["success"] != r.env["success"] {
		t.Fatalf("watched result\n%s\nREST answer\n%s", got, want)
	}
	sendJSON(t, c, map[string]any{"type": "unwatch", "id": "u", "session_id": "watched"})
	if m := readJSON(t, c, 10*time.Second); m.typ() != "ok" || m.id() != "u" {
		t.Fatalf("unwatch answer %v", m.m)
	}
}

// A client that stops reading is cut with 1008 and a reason once its queue
// passes the limit; its execution goes on and a REST call queued behind it
// on the same session completes as usual.
func TestWSSlowConsumerIsCutWithPolicyClose(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{LiveLimits: wsock.Limits{QueueBytes: 1 << 20, WriteTimeout: 2 * time.Minute}})
	c := dialWS(t, ts, nil)
	flood := "import sys\nfor i in range(640):\n    sys.stdout.write('x' * (64 << 10) + '\\n'); sys.stdout.flush()\nprint('flood done')"
	sendJSON(t, c, map[string]any{"type": "execute", "id": "flood", "language": "python", "code": flood, "session_id": "flood", "timeout": 300})
	waitRunning(t, ts, acceptedID(t, c, "flood")) // the flood first: the REST call queues behind it
	start := time.Now()
	// Its timeout counts its wait behind the 40 MiB flood, which took over
	// 30 s (the default) on a loaded machine.
	_, env, data := ts.exec(t, map[string]any{"language": "python", "code": "print('after')", "session_id": "flood", "timeout": 280})
	if env["success"] != true || data["stdout"] != "after\n" {
		t.Fatalf("REST call behind the flood: %v", env)
	}
	t.Logf("REST call completed after %s", time.Since(start))
	// Now read: what was sent, then the close frame.
	var err error
	n := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, _, err = c.Read(ctx)
		cancel()
		if err != nil {
			break
		}
		n++
	}
	var ce websocket.CloseError
	if n == 0 || !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "slow consumer") {
		t.Fatalf("after %d messages the read ended with %v; want close 1008 with a slow-consumer reason", n, err)
	}
	t.Logf("closed after %d messages: %d %q", n, ce.Code, ce.Reason)
	if ts.LiveStats()["close:slow_consumer"] < 1 {
		t.Fatalf("slow consumer close not counted: %v", ts.LiveStats())
	}
}

// Bad messages get an error reply each and the socket stays usable.
func TestWSBadMessagesGetErrorsAndSocketStaysOpen(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	c := dialWS(t, ts, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cases := []struct {
		send   string
		id     any
		status float64
		msg    string
	}{
		{`not json`, nil, 422, "not a JSON object"},
		{`[1,2]`, nil, 422, "not a JSON object"},
		{`{"id":"a"}`, "a", 422, "'type'"},
		{`{"type":"launch","id":"b"}`, "b", 422, "unknown message type"},
		{`{"type":"execute","language":"python","code":"1"}`, nil, 422, "'id'"},
		{`{"type":"execute","id":"c","language":"python"}`, "c", 422, "'code'"},
		{`{"type":"execute","id":"d","language":"cobol","code":"1"}`, "d", 422, "cobol"},
		{`{"type":"execute","id":"e","language":"python","code":"1","timeout":-1}`, "e", 422, "timeout"},
		{`{"type":"execute","id":"f","language":"python","code":"1","session_id":"a b"}`, "f", 422, "session_id"},
		{`{"type":"execute","id":{"x":1},"language":"python","code":"1"}`, nil, 422, "'id'"},
		{`{"type":"watch","id":"g","session_id":"no-such"}`, "g", 404, "not found"},
		{`{"type":"watch","id":"h"}`, "h", 422, "session_id"},
		{`{"type":"unwatch","id":"i","session_id":"no-such"}`, "i", 404, "does not watch"},
		{`{"type":"interrupt","id":"j","session_id":"no-such","language":"python"}`, "j", 404, "not found"},
		{`{"type":"interrupt","id":"k","session_id":"x","language":"cobol"}`, "k", 422, "cobol"},
	}
	for _, tc := range cases {
		if err := c.Write(ctx, websocket.MessageText, []byte(tc.send)); err != nil {
			t.Fatal(err)
		}
		m := readJSON(t, c, 10*time.Second)
		if m.typ() != "error" || m.id() != tc.id || m.m["status"] != tc.status || !strings.Contains(m.m["message"].(string), tc.msg) {
			t.Fatalf("%s -> %v; want error %v %v containing %q", tc.send, m.m, tc.id, tc.status, tc.msg)
		}
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if m := readJSON(t, c, 10*time.Second); m.typ() != "error" || m.m["status"] != float64(422) {
		t.Fatalf("binary message -> %v", m.m)
	}
	sendJSON(t, c, map[string]any{"type": "execute", "id": "ok", "language": "python", "code": "print(40+2)"})
	msgs := readUntil(t, c, "result", "ok", 2*time.Minute)
	res := msgs[len(msgs)-1].m
	if res["success"] != true || res["data"].(map[string]any)["stdout"] != "42\n" {
		t.Fatalf("execute after bad messages: %v", res)
	}
}

// interrupt stops the running code and keeps the session.
func TestWSInterruptStopsRunningCode(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	c := dialWS(t, ts, nil)
	sendJSON(t, c, map[string]any{"type": "execute", "id": 1, "language": "python", "code": "n = 5", "session_id": "spin"})
	readUntil(t, c, "result", float64(1), 2*time.Minute)
	sendJSON(t, c, map[string]any{"type": "execute", "id": 2, "language": "python", "code": "print('spinning', flush=True)\nwhile True: pass", "session_id": "spin"})
	if m := readSkipAccepted(t, c, time.Minute); m.typ() != "output" || m.id() != float64(2) {
		t.Fatalf("want the first output, got %v", m.m)
	}
	sendJSON(t, c, map[string]any{"type": "interrupt", "id": 3, "session_id": "spin", "language": "python"})
	var res map[string]any
	okSeen := false
	for res == nil {
		m := readJSON(t, c, 30*time.Second)
		switch {
		case m.typ() == "ok" && m.id() == float64(3):
			okSeen = true
		case m.typ() == "result" && m.id() == float64(2):
			res = m.m
		}
	}
	if !okSeen {
		t.Fatal("no ok for the interrupt before the result")
	}
	if res["success"] != false || !strings.HasPrefix(res["message"].(string), "execution was interrupted by a client (WebSocket interrupt)") {
		t.Fatalf("interrupted result: %v", res)
	}
	sendJSON(t, c, map[string]any{"type": "execute", "id": 4, "language": "python", "code": "print(n)", "session_id": "spin"})
	msgs := readUntil(t, c, "result", float64(4), time.Minute)
	if d := msgs[len(msgs)-1].m["data"].(map[string]any); d["stdout"] != "5\n" {
		t.Fatalf("session state after interrupt: %v", d)
	}
}

// Closing the socket does not stop its executions.
func TestWSClosedSocketDoesNotStopExecution(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	c := dialWS(t, ts, nil)
	// It runs until the test opens its gate (or 60 s), after the close.
	gate, gateOnHost := streamGate(t, ts, "default")
	code := fmt.Sprintf("import os, time\nfor _ in range(600):\n    if os.path.exists(%[1]q):\n        break\n    time.sleep(0.1)\ndone = 'yes' if os.path.exists(%[1]q) else 'no gate'", gate)
	sendJSON(t, c, map[string]any{"type": "execute", "id": "bg", "language": "python", "code": code, "session_id": "bg"})
	waitRunning(t, ts, acceptedID(t, c, "bg")) // else the REST call below could run first
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	openGate(t, gateOnHost)
	_, env, data := ts.exec(t, map[string]any{"language": "python", "code": "print(done)", "session_id": "bg"})
	if env["success"] != true || data["stdout"] != "yes\n" {
		t.Fatalf("execution did not go on after the socket closed: %v", env)
	}
}

// Cross-origin upgrades are refused unless allowed; the token is required
// on the WebSocket as on REST.
func TestWSOriginAndToken(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{AllowedOrigins: []string{"https://good.example", "*.trusted.example"}, Token: "s3cret"})
	dial := func(origin, query string, header bool) int {
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		if header {
			h.Set("Authorization", "Bearer s3cret")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, ts.wsURL("/v2/code/ws"+query), &websocket.DialOptions{HTTPHeader: h})
		if err == nil {
			_ = c.Close(websocket.StatusNormalClosure, "")
			return 101
		}
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return resp.StatusCode
	}
	host := strings.TrimPrefix(ts.URL, "http://")
	for _, tc := range []struct {
		origin, query string
		header        bool
		want          int
	}{
		{"", "", false, 401},
		{"", "?token=wrong", false, 401},
		{"", "?token=s3cret", false, 101},
		{"", "", true, 101},
		{"http://" + host, "?token=s3cret", false, 101},
		{"https://evil.example", "?token=s3cret", false, 403},
		{"https://good.example", "?token=s3cret", false, 101},
		{"http://good.example", "?token=s3cret", false, 403},
		{"https://a.trusted.example", "", true, 101},
	} {
		if got := dial(tc.origin, tc.query, tc.header); got != tc.want {
			t.Errorf("origin %q query %q header %v: HTTP %d, want %d", tc.origin, tc.query, tc.header, got, tc.want)
		}
	}
	// A plain GET on the endpoint says what it is.
	st, b := httpDo(t, "GET", ts.URL+"/v2/code/ws?token=s3cret", "", "")
	if st != 426 || !strings.Contains(string(b), "WebSocket") {
		t.Fatalf("plain GET: %d %s", st, b)
	}
}

// With "*" any origin may connect.
func TestWSAnyOriginWhenStar(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{AllowedOrigins: []string{"*"}})
	c := dialWS(t, ts, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://anywhere.example"}}})
	sendJSON(t, c, map[string]any{"type": "execute", "id": "js", "language": "javascript", "code": "console.log(1+1)"})
	msgs := readUntil(t, c, "result", "js", time.Minute)
	if r := msgs[len(msgs)-1].m; r["success"] != true || r["data"].(map[string]any)["stdout"] != "2\n" {
		t.Fatalf("javascript over the socket: %v", r)
	}
}

// Shutting the server down closes open sockets with 1001.
func TestWSShutdownClosesSockets(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	c := dialWS(t, ts, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	var err error
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _, err = c.Read(ctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ts.hub.Close(ctx); err != nil { // again: idempotent
		t.Fatal(err)
	}
	wg.Wait()
	if websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("read after shutdown: %v", err)
	}
}

// An interrupt that waits for its runtime does not hold up the socket's
// reader: a later message is answered first.
func TestWSInterruptDoesNotBlockReader(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	hold := make(chan struct{})
	stubSession(t, ts, "slow-interrupt", func() *stubRuntime {
		r := newStubRuntime()
		r.hold = hold
		return r
	})
	c := dialWS(t, ts, nil)
	sendJSON(t, c, map[string]any{"type": "interrupt", "id": "i", "session_id": "slow-interrupt", "language": "python"})
	sendJSON(t, c, map[string]any{"type": "unwatch", "id": "u", "session_id": "slow-interrupt"})
	if m := readJSON(t, c, 2*time.Second); m.id() != "u" {
		t.Fatalf("first answer %v, want the unwatch's while the interrupt waits", m.m)
	}
	close(hold)
	if m := readJSON(t, c, 5*time.Second); m.typ() != "ok" || m.id() != "i" || m.m["request"] != "interrupt" {
		t.Fatalf("after the runtime took the interrupt: %v, want its ok", m.m)
	}
}

// The core's context, under every surface's work, ends with the server,
// and the core takes no new work after it.
func TestCoreEndsWithServer(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ts.core.Ctx().Err() == nil {
		t.Fatal("the core's context outlived the server")
	}
	if ts.core.Go(func() {}) {
		t.Fatal("the core took new work after shutdown")
	}
}

// A Shutdown that comes before Serve, or races it before Serve registered
// its listener, still stops it: Serve returns and the port is closed.
func TestShutdownBeforeServe(t *testing.T) {
	t.Parallel()
	for _, race := range []bool{false, true} {
		srv := newServer(t, Config{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		serve := func() { done <- srv.Serve(ln) }
		if race {
			go serve()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("race %v: shutdown: %v", race, err)
		}
		cancel()
		if !race {
			go serve()
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("race %v: Serve still runs 10 s after Shutdown", race)
		}
		// The listener is closed (a dial could reach another test's server
		// on the same port once it is).
		if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("race %v: the listener is still open after Shutdown (Close: %v)", race, err)
		}
	}
}
