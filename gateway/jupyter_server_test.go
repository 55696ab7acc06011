package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A Debian jupyter server (1.23) started with --gateway-url pointing at
// aiod runs kernels in aiod: a Python script drives it through the
// server's own REST API and kernel WebSocket: start, print(1), 1/0,
// interrupt, restart, delete.
func TestJupyterServerWithGatewayURL(t *testing.T) {
	ts := startServer(t, Config{Token: "gw-token"})
	jurl := startJupyterServer(t, ts.URL, "gw-token", "jp-token")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "testdata/jlab/jupyter_gateway_client.py", jurl, "jp-token")
	out, err := cmd.CombinedOutput()
	t.Logf("client:\n%s", out)
	if err != nil || !strings.Contains(string(out), "ALL OK") {
		t.Fatalf("jupyter server client failed: %v", err)
	}
}

// startJupyterServer starts jupyter server on a free loopback port with
// its gateway at gatewayURL, waits until it answers, and stops it (before
// aiod) when the test ends.
func startJupyterServer(t *testing.T, gatewayURL, gatewayToken, token string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	home := t.TempDir()
	cmd := exec.Command("/usr/bin/python3", "-m", "jupyter_server",
		"--no-browser", "--allow-root", "--ip=127.0.0.1", fmt.Sprintf("--port=%d", port), "--ServerApp.port_retries=0",
		"--gateway-url="+gatewayURL, "--GatewayClient.auth_token="+gatewayToken,
		"--GatewayClient.request_timeout=120", "--GatewayClient.connect_timeout=60",
		"--ServerApp.token="+token, "--ServerApp.root_dir="+home,
	)
	cmd.Env = append(os.Environ(),
		"HOME="+home, "JUPYTER_CONFIG_DIR="+filepath.Join(home, "config"),
		"JUPYTER_DATA_DIR="+filepath.Join(home, "data"), "JUPYTER_RUNTIME_DIR="+filepath.Join(home, "runtime"),
		"JUPYTER_PLATFORM_DIRS=1",
	)
	logf, err := os.Create(filepath.Join(home, "jupyter.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("jupyter server log:\n%s", b)
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequest("GET", base+"/api", nil)
		req.Header.Set("Authorization", "token "+token)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				client.CloseIdleConnections()
				return base
			}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("jupyter server exited: %v\n%s", waitErr, b)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("jupyter server did not answer within 60 s\n%s", b)
		}
	}
}
