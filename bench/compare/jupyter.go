package compare

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/goccy/go-json"
)

// jupyterServer is a Jupyter Server (Debian python3-jupyter-server) this
// run started, on loopback, with a token.
type jupyterServer struct {
	cmd    *exec.Cmd
	base   string
	token  string
	logf   *os.File
	client *http.Client
	exited chan struct{}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func startJupyter(ctx context.Context, run, dir string, env ...string) (*jupyterServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "jupyter-root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "jupyter-server.log"))
	if err != nil {
		return nil, err
	}
	j := &jupyterServer{base: fmt.Sprintf("http://127.0.0.1:%d", port), token: randHex(16), logf: logf,
		client: &http.Client{Timeout: 2 * time.Minute}, exited: make(chan struct{})}
	j.cmd = exec.Command("/usr/bin/python3", "-m", "jupyter_server",
		"--ServerApp.token="+j.token, fmt.Sprintf("--ServerApp.port=%d", port), "--ServerApp.port_retries=0",
		"--ServerApp.ip=127.0.0.1", "--ServerApp.open_browser=False", "--ServerApp.root_dir="+root,
		"--ServerApp.allow_root=True")
	j.cmd.Dir = root
	j.cmd.Env = append(os.Environ(), markerEnv+"="+run, "JUPYTER_CONFIG_DIR="+filepath.Join(dir, "jupyter-config"),
		"JUPYTER_RUNTIME_DIR="+filepath.Join(dir, "jupyter-runtime"), "JUPYTER_DATA_DIR="+filepath.Join(dir, "jupyter-data"))
	j.cmd.Env = append(j.cmd.Env, env...)
	j.cmd.Stdout, j.cmd.Stderr = logf, logf
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := j.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("jupyter server: %w", err)
	}
	go func() { _ = j.cmd.Wait(); close(j.exited) }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", j.base+"/api/status", nil)
		req.Header.Set("Authorization", "token "+j.token)
		resp, err := j.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return j, nil
			}
		}
		select {
		case <-j.exited:
			return nil, fmt.Errorf("jupyter server exited at start: %s", tail(logf.Name()))
		case <-ctx.Done():
			j.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			j.stop()
			return nil, fmt.Errorf("jupyter server not up after 90 s: %s", tail(logf.Name()))
		}
	}
}

func (j *jupyterServer) api(ctx context.Context, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, j.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "token "+j.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return out, fmt.Errorf("%s %s: HTTP %d: %.200s", method, path, resp.StatusCode, out)
	}
	return out, nil
}

// stop shuts the server down politely (POST /api/shutdown, which stops
// its kernels), then signals its process group if it lingers.
func (j *jupyterServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, _ = j.api(ctx, "POST", "/api/shutdown", nil)
	cancel()
	pg := -j.cmd.Process.Pid
	for _, step := range []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{0, 15 * time.Second}, {syscall.SIGINT, 5 * time.Second}, {syscall.SIGTERM, 5 * time.Second}, {syscall.SIGKILL, 5 * time.Second}} {
		if step.sig != 0 {
			_ = syscall.Kill(pg, step.sig)
		}
		select {
		case <-j.exited:
			_ = syscall.Kill(pg, syscall.SIGTERM) // anything else still in its group
			j.logf.Close()
			return
		case <-time.After(step.wait):
		}
	}
	j.logf.Close()
}

// jupyterKernel is one kernel of the server, driven over its channels
// WebSocket in the legacy JSON protocol; executions are matched to their
// messages by msg_id, as the floor's are.
type jupyterKernel struct {
	id      string
	session string
	conn    *websocket.Conn
	r       *router
	n       atomic.Int64
	readErr atomic.Value
	once    sync.Once
}

func (j *jupyterServer) newKernel(ctx context.Context) (*jupyterKernel, error) {
	raw, err := j.api(ctx, "POST", "/api/kernels", map[string]string{"name": "python3"})
	if err != nil {
		return nil, fmt.Errorf("jupyter server: start kernel: %w", err)
	}
	var k struct{ ID string }
	if err := json.Unmarshal(raw, &k); err != nil || k.ID == "" {
		return nil, fmt.Errorf("jupyter server: start kernel: answer %.200q", raw)
	}
	jk := &jupyterKernel{id: k.ID, session: randHex(16), r: newRouter()}
	u := "ws" + strings.TrimPrefix(j.base, "http") + "/api/kernels/" + k.ID + "/channels?session_id=" + jk.session
	h := http.Header{}
	h.Set("Authorization", "token "+j.token)
	jk.conn, _, err = websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, fmt.Errorf("jupyter server: channels socket: %w", err)
	}
	jk.conn.SetReadLimit(64 << 20)
	go jk.readLoop()
	return jk, nil
}

func (jk *jupyterKernel) readLoop() {
	for {
		_, b, err := jk.conn.Read(context.Background())
		if err != nil {
			jk.readErr.Store(err)
			return
		}
		var m struct {
			Header struct {
				MsgType string `json:"msg_type"`
			} `json:"header"`
			Parent struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(b, &m) == nil {
			jk.r.on(m.Parent.MsgID, m.Header.MsgType, m.Content)
		}
	}
}

func (jk *jupyterKernel) exec(ctx context.Context, code string) (string, error) {
	if err, _ := jk.readErr.Load().(error); err != nil {
		return "", fmt.Errorf("jupyter server: channels socket closed: %w", err)
	}
	id := fmt.Sprintf("%s_%d", jk.session, jk.n.Add(1))
	msg := map[string]any{
		"header": map[string]any{"msg_id": id, "session": jk.session, "username": "aiobench",
			"date": time.Now().UTC().Format(time.RFC3339Nano), "msg_type": "execute_request", "version": "5.3"},
		"parent_header": map[string]any{}, "metadata": map[string]any{},
		"content": map[string]any{"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{},
			"allow_stdin": false, "stop_on_error": false},
		"channel": "shell", "buffers": []any{},
	}
	raw, _ := json.Marshal(msg)
	p := jk.r.add(id)
	if err := jk.conn.Write(ctx, websocket.MessageText, raw); err != nil {
		jk.r.remove(id)
		return "", err
	}
	return jk.r.wait(ctx, id, p)
}

func (jk *jupyterKernel) close() {
	jk.once.Do(func() { _ = jk.conn.Close(websocket.StatusNormalClosure, "done") })
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	raw, _ := os.ReadFile(path)
	if len(raw) > 1500 {
		raw = raw[len(raw)-1500:]
	}
	return string(raw)
}
