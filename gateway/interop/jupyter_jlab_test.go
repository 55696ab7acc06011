package interop

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/gateway"
	"github.com/aiod/aiod/gateway/gatewaytest"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// @jupyterlab/services (as JupyterLab uses it) starts a kernel, executes
// and receives iopub, with each framing: the v1 subprotocol it negotiates
// by default, and the legacy JSON one when it offers no subprotocol.
func TestJupyterLabServicesBothFramings(t *testing.T) {
	t.Parallel()
	dir := kerneltest.NodeModules(t, "../testdata/jlab", "@jupyterlab/services", "ws")
	ts := gatewaytest.Start(t, gateway.Config{Token: "lab-token"})
	for _, mode := range []string{"v1", "legacy"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", "jlab_client.js", ts.URL+"/", "lab-token", mode)
			cmd.Dir = dir
			out, err := cmd.Output()
			if err != nil {
				var stderr []byte
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = ee.Stderr
				}
				t.Fatalf("node jlab_client.js %s: %v\n%s\n%s", mode, err, out, stderr)
			}
			var got struct {
				ID             string `json:"id"`
				Protocol       string `json:"protocol"`
				Implementation string `json:"implementation"`
				Reply          string `json:"reply"`
				IOPub          []struct {
					Type   string `json:"type"`
					Text   string `json:"text"`
					State  string `json:"state"`
					Data   string `json:"data"`
					Parent bool   `json:"parent"`
				} `json:"iopub"`
			}
			if err := json.Unmarshal(kerneltest.ResultLine(out), &got); err != nil {
				t.Fatalf("client output: %v\n%s", err, out)
			}
			wantProto := jupyter.SubprotocolV1
			if mode == "legacy" {
				wantProto = ""
			}
			if got.Protocol != wantProto {
				t.Fatalf("negotiated %q, want %q", got.Protocol, wantProto)
			}
			if got.Reply != "ok" || got.Implementation != "ipython" {
				t.Fatalf("reply %q implementation %q", got.Reply, got.Implementation)
			}
			// The print's text may come in more than one stream message
			// (ipykernel sends what it buffered when it flushes, and a
			// loaded machine can flush between "hello from jlab" and "\n").
			var text strings.Builder
			var result, busy, idle bool
			for _, m := range got.IOPub {
				if !m.Parent {
					t.Fatalf("iopub message of another parent: %+v", m)
				}
				if m.Type == "stream" {
					text.WriteString(m.Text)
				}
				result = result || m.Type == "execute_result" && m.Data == "42"
				busy = busy || m.Type == "status" && m.State == "busy"
				idle = idle || m.Type == "status" && m.State == "idle"
			}
			if text.String() != "hello from jlab\n" || !result || !busy || !idle {
				t.Fatalf("iopub received: %+v", got.IOPub)
			}
			// The client shut its kernel down: it is gone from the API.
			if st, b := kernelGET(t, ts.URL+"/api/kernels/"+got.ID, "lab-token"); st != 404 {
				t.Fatalf("kernel after shutdown: %d %s", st, b)
			}
		})
	}
}

// kernelGET gets url with a Jupyter token and returns status and body.
func kernelGET(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
