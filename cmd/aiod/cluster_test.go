package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// natsCluster is three Debian nats-server processes with JetStream, routed
// to each other on loopback, as the cluster's tests run them.
type natsCluster struct {
	urls     []string // nats:// of each server
	monitors []string // http:// of each server's monitoring
	procs    []*exec.Cmd
}

// leaderOf is the index of the server that leads JetStream stream name,
// asked of the servers' monitoring (/jsz) for 30 s at most.
func (nc *natsCluster) leaderOf(t *testing.T, stream string) int {
	t.Helper()
	probe := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		for _, m := range nc.monitors {
			resp, err := probe.Get(m + "/jsz?accounts=true&streams=true")
			if err != nil {
				continue
			}
			var jsz struct {
				Accounts []struct {
					Streams []struct {
						Name    string `json:"name"`
						Cluster struct {
							Leader string `json:"leader"`
						} `json:"cluster"`
					} `json:"stream_detail"`
				} `json:"account_details"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&jsz)
			resp.Body.Close()
			for _, a := range jsz.Accounts {
				for _, st := range a.Streams {
					var i int
					if _, err := fmt.Sscanf(st.Cluster.Leader, "n%d", &i); st.Name == stream && err == nil && i >= 0 && i < len(nc.procs) {
						return i
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no NATS server says it leads stream %s", stream)
		}
	}
}

// startNATS starts three JetStream servers and waits until they have
// elected a meta leader; they are killed when the test ends.
func startNATS(t *testing.T) *natsCluster {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server" // Debian's, not on a user's PATH
	}
	dir := t.TempDir()
	nc := &natsCluster{}
	// Nine distinct ports: each listener is held until all are picked.
	var ports []int
	var held []net.Listener
	for range 9 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range held {
		ln.Close()
	}
	var client, route, monitor [3]int
	for i := range 3 {
		client[i], route[i], monitor[i] = ports[3*i], ports[3*i+1], ports[3*i+2]
	}
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", route[i]))
	}
	for i := range 3 {
		cmd := exec.Command(bin, "-js", "-sd", filepath.Join(dir, fmt.Sprint(i)), "-n", fmt.Sprintf("n%d", i),
			"-a", "127.0.0.1", "-p", fmt.Sprint(client[i]), "-m", fmt.Sprint(monitor[i]),
			"--cluster_name", "aiodtest", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
		log := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start nats-server (apt-get install nats-server): %v", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-done
			if t.Failed() {
				t.Logf("nats-server n%d:\n%s", i, log)
			}
		})
		nc.urls = append(nc.urls, fmt.Sprintf("nats://127.0.0.1:%d", client[i]))
		nc.monitors = append(nc.monitors, fmt.Sprintf("http://127.0.0.1:%d", monitor[i]))
		nc.procs = append(nc.procs, cmd)
	}
	probe := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := probe.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", monitor[0]))
		if err == nil {
			var jsz struct {
				Meta struct {
					Leader string `json:"leader"`
				} `json:"meta_cluster"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&jsz)
			resp.Body.Close()
			if jsz.Meta.Leader != "" {
				return nc
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the NATS servers elected no JetStream leader within 60 s")
		}
	}
}

// startReplicas starts n aiod replicas of one cluster over nc, verifying
// JWTs with pub; probe is a JWT to ask them with.
func startReplicas(t *testing.T, nc *natsCluster, pub, probe string, n int, extra ...string) []*daemon {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("a shared secret of the test cluster\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"AIO_JWT_PUBLIC_KEY=" + pub, "AIO_CLUSTER_NATS=" + strings.Join(nc.urls, ","),
		"AIO_CLUSTER_SECRET_FILE=" + secret, "AIO_KERNEL_PREWARM=0"}
	var ds []*daemon
	for range n {
		ds = append(ds, startDaemonEnv(t, env, extra...))
	}
	// Each replica has heard the others' heartbeats.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		all := true
		for _, d := range ds {
			_, env, _ := replicaCall(t, d, probe, http.MethodGet, "/v2/cluster", nil)
			data, _ := env["data"].(map[string]any)
			members, _ := data["members"].([]any)
			alive := 0
			for _, m := range members {
				if m.(map[string]any)["alive"] == true {
					alive++
				}
			}
			all = all && alive == n
		}
		if all {
			return ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replicas did not all see each other within 30 s")
		}
	}
}

// replicaCall sends a request to d with token (if any) and returns the
// status, the decoded envelope and the replica that answered
// (AIO-Replica).
func replicaCall(t *testing.T, d *daemon, token, method, path string, body any) (int, map[string]any, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, env, h := (&caller{t: t, d: d, name: d.url, token: token}).callWithHeader(ctx, method, path, body)
	return st, env, h.Get("AIO-Replica")
}

// metricsOf is d's /metrics text, asked with token.
func metricsOf(t *testing.T, d *daemon, token string) string {
	t.Helper()
	_, env, _ := replicaCall(t, d, token, http.MethodGet, "/metrics", nil)
	raw, _ := env["raw"].(string)
	return raw
}

// waitMetrics waits, for a minute at most, until each series of d's
// /metrics has at least its value (a replica's background writes give no
// other sign); what names what is awaited.
func waitMetrics(t *testing.T, d *daemon, token, what string, atLeast map[string]float64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		m, ok := metricsOf(t, d, token), true
		for series, v := range atLeast {
			ok = ok && metricValue(m, series) >= v
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute on %s:\n%s", what, d.url, m)
		}
	}
}

// metricValue is the value of the series line of text that starts with
// series (its name and labels, as Prometheus writes them), or -1.
func metricValue(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}

// Three replicas over a three-node JetStream cluster, each caller's
// requests spread over them round robin: a tenant's session keeps its
// variables whichever replica is called, every answer names the tenant's
// one home, an execution is fetched by id through any replica, a
// WebSocket execute through a replica that is not the home streams its
// outputs live, and another tenant's session of the same id, executions
// and files are its own through every replica.
func TestClusterAnyReplicaAnswers(t *testing.T) {
	kerneltest.SkipShort(t, "a cluster of daemons")
	nc := startNATS(t)
	priv, pub := tenantKey(t)
	alice, bob := tenantJWT(t, priv, "alice"), tenantJWT(t, priv, "bob")
	ds := startReplicas(t, nc, pub, alice, 3)
	execute := func(d *daemon, token, sid, code string) (map[string]any, string) {
		t.Helper()
		st, env, replica := replicaCall(t, d, token, http.MethodPost, "/v2/code/execute",
			map[string]any{"language": "python", "session_id": sid, "code": code, "timeout": 60})
		data, _ := env["data"].(map[string]any)
		if st != 200 || data == nil {
			t.Fatalf("execute on %s: %d %v", d.url, st, env)
		}
		return data, replica
	}
	count := "try:\n    n += 1\nexcept NameError:\n    n = 1\nprint(n)"
	homes := map[string]map[string]bool{"alice": {}, "bob": {}}
	var aliceExec string
	for i := range 6 {
		d := ds[i%3]
		data, replica := execute(d, alice, "s", count)
		if got := strings.TrimSpace(fmt.Sprint(data["stdout"])); got != fmt.Sprint(i+1) {
			t.Fatalf("alice's call %d through %s printed %q, want %d (the session's variables on every replica)", i+1, d.url, got, i+1)
		}
		homes["alice"][replica] = true
		aliceExec, _ = data["execution_id"].(string)
		if i == 0 {
			// The replica that places bob knows where alice lives.
			waitTenants(t, ds[1], alice, 1)
		}
		// bob's session of the same id is his own.
		data, replica = execute(ds[(i+1)%3], bob, "s", count)
		if got := strings.TrimSpace(fmt.Sprint(data["stdout"])); got != fmt.Sprint(i+1) {
			t.Fatalf("bob's call %d printed %q, want %d", i+1, got, i+1)
		}
		homes["bob"][replica] = true
	}
	for who, hs := range homes {
		if len(hs) != 1 || hs[""] {
			t.Fatalf("%s's answers named replicas %v: want the one home", who, hs)
		}
	}
	// A new tenant goes to the replica with the most room: bob not where
	// alice already lives.
	for h := range homes["bob"] {
		if homes["alice"][h] {
			t.Fatalf("bob was placed on alice's home %s, with two replicas holding no tenant", h)
		}
	}
	// The execution by id through every replica; bob gets 404 for it.
	for _, d := range ds {
		if st, env, _ := replicaCall(t, d, alice, http.MethodGet, "/v2/code/executions/"+aliceExec, nil); st != 200 {
			t.Fatalf("alice's execution through %s: %d %v", d.url, st, env)
		}
		if st, _, _ := replicaCall(t, d, bob, http.MethodGet, "/v2/code/executions/"+aliceExec, nil); st != 404 {
			t.Fatalf("bob fetched alice's execution through %s: %d, want 404", d.url, st)
		}
		st, env, _ := replicaCall(t, d, alice, http.MethodGet, "/v2/cluster", nil)
		data, _ := env["data"].(map[string]any)
		if st != 200 || data["home"] == nil || !homes["alice"][fmt.Sprint(data["home"])] {
			t.Fatalf("GET /v2/cluster for alice through %s: %v (her home: %v)", d.url, env, homes["alice"])
		}
	}
	walkthroughAcross(t, ds, alice)
	// Files: a file of alice's is hers through every replica, not bob's.
	execute(ds[0], alice, "s", "open('/tmp/only-alice', 'w').write('hers')")
	for _, d := range ds {
		if data, _ := execute(d, bob, "s", "import os\nprint(os.path.exists('/tmp/only-alice'))"); strings.TrimSpace(fmt.Sprint(data["stdout"])) != "False" {
			t.Fatalf("bob sees alice's file through %s", d.url)
		}
		if st, env, _ := replicaCall(t, d, bob, http.MethodGet, "/v2/fs/download?path=/tmp/only-alice", nil); st != http.StatusNotFound {
			t.Fatalf("bob downloads alice's file through %s: %d %v, want 404", d.url, st, env)
		}
		if st, env, _ := replicaCall(t, d, alice, http.MethodGet, "/v2/fs/download?path=/tmp/only-alice", nil); st != 200 || env["raw"] != "hers" {
			t.Fatalf("alice downloads her file through %s: %d %v", d.url, st, env)
		}
	}

	// A WebSocket execute through a replica that is not alice's home: its
	// first output arrives while the code still waits for a file that is
	// written only after that output was seen.
	var other *daemon
	for _, d := range ds {
		if !homes["alice"][strings.TrimPrefix(d.url, "http://")] {
			other = d
			break
		}
	}
	if other == nil {
		t.Fatalf("no replica is not alice's home %v", homes["alice"])
	}
	// The WebSocket is a browser's: it brings a ticket that another
	// replica issued, and no header.
	var issuer, third *daemon
	for _, d := range ds {
		switch {
		case d == other:
		case issuer == nil:
			issuer = d
		default:
			third = d
		}
	}
	st, env, _ := replicaCall(t, issuer, alice, http.MethodPost, "/tickets", nil)
	ticket, _ := env["ticket"].(string)
	if st != 200 || ticket == "" {
		t.Fatalf("a ticket from %s: %d %v", issuer.url, st, env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(other.url, "http")+"/v2/code/ws?ticket="+ticket, nil)
	if err != nil {
		t.Fatalf("WebSocket through %s with a ticket from %s: %v", other.url, issuer.url, err)
	}
	// The ticket worked once: brought to the third replica, it is refused.
	if st, env, _ := replicaCall(t, third, "", http.MethodGet, "/v2/code/sessions?ticket="+ticket, nil); st != http.StatusUnauthorized {
		t.Fatalf("a used ticket through %s: %d %v, want 401", third.url, st, env)
	}
	defer ws.CloseNow()
	if r := resp.Header.Get("AIO-Replica"); !homes["alice"][r] {
		t.Fatalf("the WebSocket's answer names replica %q, want alice's home %v", r, homes["alice"])
	}
	code := "import os, time\nprint('waiting', flush=True)\nwhile not os.path.exists('/tmp/go-on'):\n    time.sleep(0.05)\nprint('done')"
	msg, _ := json.Marshal(map[string]any{"type": "execute", "id": "w", "language": "python", "session_id": "ws", "code": code})
	if err := ws.Write(ctx, websocket.MessageText, msg); err != nil {
		t.Fatal(err)
	}
	sawWaiting := false
read:
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("WebSocket read (waiting seen: %v): %v", sawWaiting, err)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		switch m["type"] {
		case "output":
			if strings.Contains(string(b), "waiting") && !sawWaiting {
				sawWaiting = true
				execute(ds[2], alice, "s", "open('/tmp/go-on', 'w').close()")
			}
		case "result":
			if !sawWaiting || m["success"] != true || !strings.Contains(string(b), "done") {
				t.Fatalf("result before the live output, or not ok: waiting seen %v, %s", sawWaiting, b)
			}
			// The replica counted what it forwarded to alice's home.
			var aliceHome string
			for h := range homes["alice"] {
				aliceHome = h
			}
			text := metricsOf(t, other, alice)
			if n := metricValue(text, `aiod_cluster_forwards_total{outcome="answered",to="`+aliceHome+`"}`); n < 2 {
				t.Fatalf("the forwards to alice's home counted on %s: %v\n%s", other.url, n, text)
			}
			if n := metricValue(text, `aiod_cluster_forward_duration_seconds_count{to="`+aliceHome+`"}`); n < 2 {
				t.Fatalf("the forwards' durations on %s: %v", other.url, n)
			}
			placed := 0.0
			for _, d := range ds {
				placed += max(metricValue(metricsOf(t, d, alice), `aiod_cluster_placements_total{why="new"}`), 0)
			}
			if placed != 2 {
				t.Fatalf("%v tenants placed across the replicas, want alice and bob", placed)
			}
			break read
		case "error":
			t.Fatalf("WebSocket error: %s", b)
		}
	}
	var aliceHome string
	for h := range homes["alice"] {
		aliceHome = h
	}
	otherSurfacesForwarded(t, other, alice, aliceHome)
}

// waitRunning waits, for a minute at most, until the token's session sid
// runs a call, as listed through d.
func waitRunning(t *testing.T, d *daemon, token, sid string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, env, _ := replicaCall(t, d, token, http.MethodGet, "/v2/code/sessions", nil)
		data, _ := env["data"].(map[string]any)
		list, _ := data["sessions"].([]any)
		for _, s := range list {
			m, _ := s.(map[string]any)
			if ex, _ := m["executing"].(map[string]any); m["session_id"] == sid && ex["state"] == "running" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s is not running a call through %s after a minute: %v", sid, d.url, env)
		}
	}
}

// waitTenants waits, for 30 s at most, until d's view of the cluster has
// at least n tenants placed.
func waitTenants(t *testing.T, d *daemon, token string, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, env, _ := replicaCall(t, d, token, http.MethodGet, "/v2/cluster", nil)
		data, _ := env["data"].(map[string]any)
		members, _ := data["members"].([]any)
		placed := 0.0
		for _, m := range members {
			v, _ := m.(map[string]any)["tenants"].(float64)
			placed += v
		}
		if placed >= float64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s knows %v tenants after 30 s, want %d: %v", d.url, placed, n, env)
		}
	}
}

// otherSurfacesForwarded drives, through d (not the tenant's home, named
// home), the surfaces forwarded besides REST, SSE and /v2/code/ws: an
// NDJSON execute, a Jupyter kernel's channels, a terminal's socket and
// MCP. Each is served at the home (AIO-Replica) and works end to end.
func otherSurfacesForwarded(t *testing.T, d *daemon, token, home string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	auth := http.Header{"Authorization": {"Bearer " + token}}
	post := func(path, accept, body string, hdr http.Header) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatalf("POST %s through %s: %v", path, d.url, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 || resp.Header.Get("AIO-Replica") != home {
			t.Fatalf("POST %s through %s: %d from %q (home %s): %s", path, d.url, resp.StatusCode, resp.Header.Get("AIO-Replica"), home, raw)
		}
		return resp, raw
	}

	// NDJSON: the outputs, then the result, one object a line.
	_, raw := post("/v2/code/execute", "application/x-ndjson",
		`{"language":"python","session_id":"nd","code":"print('one', flush=True)\nprint('two')"}`, nil)
	var types []string
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("an NDJSON line through %s: %q", d.url, line)
		}
		types = append(types, fmt.Sprint(m["type"]))
		if o, ok := m["output"].(map[string]any); ok {
			out.WriteString(fmt.Sprint(o["text"]))
		}
		if m["type"] == "result" && m["success"] != true {
			t.Fatalf("the NDJSON result through %s: %s", d.url, line)
		}
	}
	if out.String() != "one\ntwo\n" || types[len(types)-1] != "result" {
		t.Fatalf("NDJSON through %s: outputs %q, types %v", d.url, out.String(), types)
	}

	// A Jupyter kernel and its channels.
	_, raw = post("/api/kernels", "", `{"name":"python3"}`, nil)
	var kernel struct{ ID string }
	if json.Unmarshal(raw, &kernel); kernel.ID == "" {
		t.Fatalf("POST /api/kernels through %s: %s", d.url, raw)
	}
	wsURL := "ws" + strings.TrimPrefix(d.url, "http")
	ch, resp, err := websocket.Dial(ctx, wsURL+"/api/kernels/"+kernel.ID+"/channels", &websocket.DialOptions{HTTPHeader: auth})
	if err != nil {
		t.Fatalf("the kernel's channels through %s: %v", d.url, err)
	}
	defer ch.CloseNow()
	if r := resp.Header.Get("AIO-Replica"); r != home {
		t.Fatalf("the channels' upgrade answered by %q, want the home %s", r, home)
	}
	request := `{"channel":"shell","header":{"msg_id":"x1","session":"c","username":"u","msg_type":"execute_request","version":"5.3","date":null},` +
		`"parent_header":{},"metadata":{},"content":{"code":"print(6*7)","silent":false,"store_history":true,"user_expressions":{},"allow_stdin":false}}`
	if err := ch.Write(ctx, websocket.MessageText, []byte(request)); err != nil {
		t.Fatal(err)
	}
	var printed, replied bool
	for !printed || !replied {
		_, b, err := ch.Read(ctx)
		if err != nil {
			t.Fatalf("the channels through %s (printed %v, replied %v): %v", d.url, printed, replied, err)
		}
		var m struct {
			Channel string
			Header  struct {
				MsgType string `json:"msg_type"`
			}
			ParentHeader struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content map[string]any
		}
		_ = json.Unmarshal(b, &m)
		if m.ParentHeader.MsgID != "x1" {
			continue
		}
		switch m.Header.MsgType {
		case "stream":
			printed = printed || m.Content["text"] == "42\n"
		case "execute_reply":
			if m.Content["status"] != "ok" {
				t.Fatalf("execute_reply through %s: %s", d.url, b)
			}
			replied = true
		}
	}

	// A terminal and its socket.
	_, raw = post("/api/terminals", "", `{}`, nil)
	var term struct{ Name string }
	if json.Unmarshal(raw, &term); term.Name == "" {
		t.Fatalf("POST /api/terminals through %s: %s", d.url, raw)
	}
	tc, resp, err := websocket.Dial(ctx, wsURL+"/terminals/websocket/"+term.Name, &websocket.DialOptions{HTTPHeader: auth})
	if err != nil {
		t.Fatalf("the terminal's socket through %s: %v", d.url, err)
	}
	defer tc.CloseNow()
	if r := resp.Header.Get("AIO-Replica"); r != home {
		t.Fatalf("the terminal's upgrade answered by %q, want the home %s", r, home)
	}
	if err := tc.Write(ctx, websocket.MessageText, []byte(`["stdin","echo forwarded-$((40+2))\n"]`)); err != nil {
		t.Fatal(err)
	}
	var screen strings.Builder
	for !strings.Contains(screen.String(), "forwarded-42") {
		_, b, err := tc.Read(ctx)
		if err != nil {
			t.Fatalf("the terminal through %s: %v; screen %q", d.url, err, screen.String())
		}
		var msg []string
		_ = json.Unmarshal(b, &msg)
		if len(msg) == 2 && msg[0] == "stdout" {
			screen.WriteString(msg[1])
		}
	}

	// MCP: a session, then a tool call that runs code at the home.
	resp, _ = post("/mcp", "application/json, text/event-stream",
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, nil)
	mcp := http.Header{"Mcp-Session-Id": {resp.Header.Get("Mcp-Session-Id")}}
	post("/mcp", "application/json, text/event-stream", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, mcp)
	_, raw = post("/mcp", "application/json, text/event-stream",
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"python","code":"print('mcp', 6*7)"}}}`, mcp)
	if !strings.Contains(string(raw), "mcp 42") {
		t.Fatalf("MCP execute_code through %s: %s", d.url, raw)
	}
}

// A request that says another replica forwarded it is refused by every
// replica unless the cluster's secret signed it, whatever credentials it
// also carries; a single daemon refuses it too.
func TestClusterRefusesForgedForwards(t *testing.T) {
	kerneltest.SkipShort(t, "a cluster of daemons")
	nc := startNATS(t)
	priv, pub := tenantKey(t)
	alice := tenantJWT(t, priv, "alice")
	ds := startReplicas(t, nc, pub, alice, 2)
	single := startDaemon(t)
	forged := []string{
		"e30.AAAA", // {} with a made-up signature
		"eyJtIjoiand0IiwicyI6ImFsaWNlIn0.c2lnbmVk",
		"not a claim",
	}
	for _, d := range append(ds, single) {
		for _, f := range forged {
			for _, token := range []string{"", alice} {
				req, _ := http.NewRequest(http.MethodGet, d.url+"/v2/code/sessions", nil)
				req.Header.Set("AIO-Forwarded-Caller", f)
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				resp, err := d.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "cluster") {
					t.Fatalf("a forged forward %q (token %v) to %s: %d %s", f, token != "", d.url, resp.StatusCode, body)
				}
			}
		}
	}
	// Without credentials nothing is forwarded either: the replica's own
	// guard answers first.
	if st, _, replica := replicaCall(t, ds[0], "", http.MethodGet, "/v2/code/sessions", nil); st != 401 || replica != strings.TrimPrefix(ds[0].url, "http://") {
		t.Fatalf("no credentials: %d from %q", st, replica)
	}
	_ = ed25519.PublicKeySize
}

// What a cluster survives: a tenant's home killed (kill -9) after a
// checkpoint: calls under way through other replicas are answered within
// 60 s, not as a success (a REST call with 502, a stream with an error
// event), and within 30 s the tenant's next call through a live replica
// finds it a new home, which restores its session, files and executions
// from the last checkpoint; then the NATS server leading the cluster's
// directory lost: calls and new tenants go on.
func TestClusterSurvivesLosses(t *testing.T) {
	kerneltest.SkipShort(t, "a cluster of daemons")
	nc := startNATS(t)
	priv, pub := tenantKey(t)
	alice, carol := tenantJWT(t, priv, "alice"), tenantJWT(t, priv, "carol")
	// A lease longer than JetStream takes to recover from the loss of a
	// server (its leaders elected again): a replica that cannot beat for
	// longer is taken for gone, and its tenants move.
	ds := startReplicas(t, nc, pub, alice, 3, "--cluster-lease", "10", "--cluster-checkpoint", "1")
	execute := func(d *daemon, token, sid, code string) (int, map[string]any, string) {
		t.Helper()
		return replicaCall(t, d, token, http.MethodPost, "/v2/code/execute",
			map[string]any{"language": "python", "session_id": sid, "code": code, "timeout": 120})
	}
	// Alice's first request writes a file through the file plane, and no
	// code runs: her files are checkpointed for that write alone.
	st, env, planeHome := replicaCall(t, ds[2], alice, http.MethodPost, "/v2/fs/write",
		map[string]any{"path": "/tmp/plane.txt", "content": "through the plane"})
	if st != 200 {
		t.Fatalf("alice's file through the plane: %d %v", st, env)
	}
	for _, d := range ds {
		if strings.TrimPrefix(d.url, "http://") == planeHome {
			waitMetrics(t, d, alice, "alice's files written after a write through the plane",
				map[string]float64{`aiod_cluster_checkpoint_files_total{outcome="written"}`: 1})
		}
	}
	if st, env, _ := replicaCall(t, ds[0], alice, http.MethodPost, "/v2/code/execute", map[string]any{"language": "python",
		"session_id": "s", "code": "x = 41\n" + writeFiles + "\nprint('first')", "execution_id": "alice-first"}); st != 200 {
		t.Fatalf("alice's first call: %d %v", st, env)
	}
	if st, env, _ := execute(ds[1], alice, "d", "y = 1"); st != 200 {
		t.Fatalf("alice's session d: %d %v", st, env)
	}

	// Alice's home.
	st, env, home := execute(ds[0], alice, "s", "print(x)")
	if st != 200 {
		t.Fatalf("alice's second call: %d %v", st, env)
	}
	var homeD *daemon
	var others []*daemon
	for _, d := range ds {
		if strings.TrimPrefix(d.url, "http://") == home {
			homeD = d
		} else {
			others = append(others, d)
		}
	}
	if homeD == nil || len(others) != 2 {
		t.Fatalf("alice's home %q is none of the replicas", home)
	}
	// Her sessions' checkpoints, written a second after their calls; then
	// she deletes d, and its checkpoint goes with it.
	waitMetrics(t, homeD, alice, "checkpoints of alice's two sessions, her files and her three executions", map[string]float64{
		`aiod_cluster_checkpoints_total{outcome="written"}`:      2,
		`aiod_cluster_checkpoint_files_total{outcome="written"}`: 2,
		`aiod_cluster_executions_total{outcome="written"}`:       3,
	})
	if st, env, _ := replicaCall(t, others[0], alice, http.MethodDelete, "/v2/code/sessions/d", nil); st != 200 {
		t.Fatalf("delete alice's session d: %d %v", st, env)
	}

	// Calls under way through another replica when the home dies: a REST
	// call, running at the home before the kill, and a stream.
	rest := make(chan int, 1)
	go func() {
		st, _, _ := execute(others[1], alice, "r", "import time\ntime.sleep(110)")
		rest <- st
	}()
	waitRunning(t, others[1], alice, "r")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"language": "python", "session_id": "s", "timeout": 120,
		"code": "import time\nprint('started', flush=True)\ntime.sleep(110)"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, others[0].url+"/v2/code/execute", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+alice)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := others[0].client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64<<10)
	var got strings.Builder
	for !strings.Contains(got.String(), "started") {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("the stream ended before its first output: %v\n%s", err, got.String())
		}
	}
	killed := time.Now()
	if err := homeD.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	rest2, _ := io.ReadAll(resp.Body) // ends: the home is gone
	got.Write(rest2)
	ended := time.Since(killed)
	t.Logf("the stream ended %.1f s after its home was killed", ended.Seconds())
	if !strings.Contains(got.String(), "event: error") || strings.Contains(got.String(), `"success":true`) {
		t.Fatalf("the stream through %s after its home died:\n%s", others[0].url, got.String())
	}
	if ended > time.Minute {
		t.Fatalf("the stream under way ended %v after its home died, want within 60 s", ended)
	}
	select {
	case st := <-rest:
		answered := time.Since(killed)
		t.Logf("the REST call was answered %d, %.1f s after its home was killed", st, answered.Seconds())
		if st != http.StatusBadGateway {
			t.Fatalf("a REST call under way when its home died: %d, want 502", st)
		}
		if answered > time.Minute {
			t.Fatalf("the REST call under way was answered %v after its home died, want within 60 s", answered)
		}
	case <-ctx.Done():
		t.Fatal("a REST call under way when its home died was not answered")
	}

	// The next call finds alice a new home among the live replicas, which
	// restores her session from its checkpoint.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st, env, r := execute(others[1], alice, "s", "print(x)\n"+readFiles+"\nprint(open('/tmp/plane.txt').read())")
		if st == 200 {
			if r == home || r == "" {
				t.Fatalf("after her home died alice was answered by %q", r)
			}
			data, _ := env["data"].(map[string]any)
			if data["stdout"] != "41\n"+filesRead+"through the plane\n" || data["restored"] != true {
				t.Fatalf("alice's session at her new home %s, after her home died: %v", r, env)
			}
			back := time.Since(killed)
			t.Logf("alice's new home %s answered with her checkpointed session %.1f s after the old one was killed (lease 10 s)", r, back.Seconds())
			if back > 30*time.Second {
				t.Fatalf("alice's state came back %v after her home died, want within 30 s", back)
			}
			// The replica that placed her again (the one called) counts it.
			moved := 0.0
			for _, d := range others {
				moved += max(metricValue(metricsOf(t, d, alice), `aiod_cluster_placements_total{why="moved"}`), 0)
			}
			if moved < 1 {
				t.Fatalf("alice's move to %s is not counted as a placement (moved) on the live replicas", r)
			}
			break
		}
		// 502: forwarded to the dead home; 503: a replica whose view of
		// the directory lagged; both say to try again.
		if st != http.StatusBadGateway && st != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("alice after her home died: %d %v", st, env)
		}
	}
	// Her first execution, fetched by id through the third replica, from
	// the cluster's store: its home is gone.
	if st, env, r := replicaCall(t, others[0], alice, http.MethodGet, "/v2/code/executions/alice-first", nil); st != 200 ||
		env["data"].(map[string]any)["stdout"] != "first\n" || env["data"].(map[string]any)["state"] != "done" {
		t.Fatalf("alice's first execution after its home died, through %s (answered by %s): %d %v", others[0].url, r, st, env)
	}
	if st, env, _ := replicaCall(t, others[0], tenantJWT(t, priv, "dave"), http.MethodGet, "/v2/code/executions/alice-first", nil); st != 404 {
		t.Fatalf("dave asking for alice's execution id: %d %v, want 404", st, env)
	}
	// The session she deleted did not come back with the others.
	if st, env, _ := execute(others[0], alice, "d", "print(y)"); st != 200 || env["data"].(map[string]any)["restored"] == true ||
		!strings.Contains(fmt.Sprint(env), "NameError") {
		t.Fatalf("alice's deleted session d at her new home: %d %v", st, env)
	}
	// Then one NATS server of three goes, the one leading the directory's
	// stream: calls through the live replicas and a new tenant go on.
	lost := time.Now()
	leader := nc.leaderOf(t, "KV_aiod_cluster")
	_ = nc.procs[leader].Process.Kill()
	t.Logf("killed nats-server n%d, the leader of the directory's stream", leader)
	for _, d := range others {
		if st, env, _ := execute(d, alice, "s2", "print('on')"); st != 200 || env["data"].(map[string]any)["status"] != "ok" {
			t.Fatalf("alice through %s without one NATS server: %d %v", d.url, st, env)
		}
	}
	t.Logf("alice through the two live replicas %.1f s after a NATS server was lost", time.Since(lost).Seconds())
	if st, env, r := execute(others[0], carol, "c", "print('carol')"); st != 200 || r == "" {
		t.Fatalf("a new tenant without one NATS server: %d %v (replica %q)", st, env, r)
	}
	t.Logf("a new tenant served %.1f s after a NATS server was lost", time.Since(lost).Seconds())

}

// walkthroughAcross runs the v2 contract's walkthrough (a dataset through
// the file plane, a DataFrame in a named session, a chart saved as a file,
// listed and downloaded, the session deleted) with each step through the
// next replica of ds.
func walkthroughAcross(t *testing.T, ds []*daemon, token string) {
	t.Helper()
	step := 0
	next := func(method, path string, body any) map[string]any {
		t.Helper()
		d := ds[step%len(ds)]
		step++
		st, env, r := replicaCall(t, d, token, method, path, body)
		if st != 200 || r == "" {
			t.Fatalf("walkthrough step %d through %s: %s %s: %d %v (replica %q)", step, d.url, method, path, st, env, r)
		}
		return env
	}
	next(http.MethodPost, "/v2/fs/write", map[string]any{"path": "/tmp/analysis/sales.csv", "content": "month,revenue,cost\n" +
		"2026-01,120,80\n2026-02,135,82\n2026-03,150,90\n2026-04,142,95\n2026-05,168,99\n2026-06,180,104\n"})
	env := next(http.MethodPost, "/v2/code/execute", map[string]any{"language": "python", "session_id": "analysis",
		"code": "import pandas as pd\ndf = pd.read_csv('/tmp/analysis/sales.csv')\ndf['margin'] = df.revenue - df.cost\nprint(df.margin.describe())"})
	if out := fmt.Sprint(env["data"].(map[string]any)["stdout"]); !strings.Contains(out, "mean     57.500000") {
		t.Fatalf("walkthrough: the margin's description: %q", out)
	}
	next(http.MethodPost, "/v2/code/execute", map[string]any{"language": "python", "session_id": "analysis",
		"code": "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n" +
			"df.plot(x='month', y=['revenue', 'cost'], kind='bar', figsize=(6, 3))\nplt.tight_layout()\nplt.savefig('/tmp/analysis/plot.png', dpi=120)"})
	env = next(http.MethodGet, "/v2/fs/list?path=/tmp/analysis", nil)
	if !strings.Contains(fmt.Sprint(env["data"]), "plot.png") {
		t.Fatalf("walkthrough: the listing has no plot.png: %v", env)
	}
	env = next(http.MethodGet, "/v2/fs/download?path=/tmp/analysis/plot.png", nil)
	if raw, _ := env["raw"].(string); !strings.HasPrefix(raw, "\x89PNG") {
		t.Fatalf("walkthrough: the chart's bytes: %.40q", raw)
	}
	next(http.MethodDelete, "/v2/code/sessions/analysis", nil)
}

// writeFiles is Python that writes a file in the tenant's HOME and one in
// its /tmp; readFiles prints them (filesRead) and who owns them.
const (
	writeFiles = "import os\nopen(os.path.expanduser('~/h.txt'), 'w').write('home file')\nopen('/tmp/t.txt', 'w').write('tmp file')"
	readFiles  = "import os\nfor p in [os.path.expanduser('~/h.txt'), '/tmp/t.txt']:\n    print(open(p).read(), os.stat(p).st_uid == os.getuid())"
	filesRead  = "home file True\ntmp file True\n"
)

// A home that stops (SIGTERM) hands its tenants' saved sessions over: the
// next call through another replica, once the home has left, finds the
// tenant a new home that restores the session (restored: true) with its
// variables and files, within 10 s of the SIGTERM.
func TestClusterHandsOverOnStop(t *testing.T) {
	kerneltest.SkipShort(t, "a cluster of daemons")
	nc := startNATS(t)
	priv, pub := tenantKey(t)
	alice := tenantJWT(t, priv, "alice")
	ds := startReplicas(t, nc, pub, alice, 2)
	st, env, home := replicaCall(t, ds[0], alice, http.MethodPost, "/v2/code/execute",
		map[string]any{"language": "python", "session_id": "keep", "code": "x = 'kept across replicas'\n" + writeFiles})
	if st != 200 {
		t.Fatalf("alice's first call: %d %v", st, env)
	}
	homeD, other := ds[0], ds[1]
	if strings.TrimPrefix(ds[1].url, "http://") == home {
		homeD, other = ds[1], ds[0]
	}
	stopped := time.Now()
	homeD.stop()
	t.Logf("alice's home stopped in %.1f s", time.Since(stopped).Seconds())
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st, env, r := replicaCall(t, other, alice, http.MethodPost, "/v2/code/execute",
			map[string]any{"language": "python", "session_id": "keep", "code": "print(x)\n" + readFiles})
		data, _ := env["data"].(map[string]any)
		if st == 200 && data != nil {
			if data["stdout"] != "kept across replicas\n"+filesRead || data["restored"] != true {
				t.Fatalf("alice's session on her new home %s: %v", r, env)
			}
			back := time.Since(stopped)
			t.Logf("alice's session answered from %s, restored, %.1f s after her old home began to stop", r, back.Seconds())
			if back > 10*time.Second {
				t.Fatalf("alice's session came back %v after her home's SIGTERM, want within 10 s", back)
			}
			m := metricsOf(t, other, alice)
			if n := metricValue(m, `aiod_cluster_handover_sessions_total{direction="in"}`); n != 1 {
				t.Fatalf("sessions taken in on %s: %v, want 1", other.url, n)
			}
			if n := metricValue(m, `aiod_cluster_takein_duration_seconds_count`); n != 1 {
				t.Fatalf("take-ins timed on %s: %v, want 1", other.url, n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice after her home stopped: %d %v", st, env)
		}
	}
}
