package interop

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/gateway"
	"github.com/aiod/aiod/gateway/gatewaytest"
	"github.com/aiod/aiod/kernel/remote/remotetest"
)

// A Debian jupyter server (1.23) started with --gateway-url pointing at
// aiod runs kernels in aiod: a Python script drives it through the
// server's own REST API and kernel WebSocket: start, print(1), 1/0,
// interrupt, restart, delete.
func TestJupyterServerWithGatewayURL(t *testing.T) {
	t.Parallel()
	ts := gatewaytest.Start(t, gateway.Config{Token: "gw-token"})
	// Stopped before aiod (cleanups run last-in first-out).
	js := remotetest.Start(t, "--gateway-url="+ts.URL, "--GatewayClient.auth_token=gw-token",
		"--GatewayClient.request_timeout=120", "--GatewayClient.connect_timeout=60")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "../testdata/jlab/jupyter_gateway_client.py", js.URL, js.Token)
	out, err := cmd.CombinedOutput()
	t.Logf("client:\n%s", out)
	if err != nil || !strings.Contains(string(out), "ALL OK") {
		t.Fatalf("jupyter server client failed: %v", err)
	}
}
