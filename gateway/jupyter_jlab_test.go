package gateway

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// @jupyterlab/services (as JupyterLab uses it) starts a kernel, executes
// and receives iopub, with each framing: the v1 subprotocol it negotiates
// by default, and the legacy JSON one when it offers no subprotocol.
func TestJupyterLabServicesBothFramings(t *testing.T) {
	t.Parallel()
	dir := jlabDir(t)
	ts := startServer(t, Config{Token: "lab-token"})
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
			line := ""
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, "RESULT ") {
					line = strings.TrimPrefix(l, "RESULT ")
				}
			}
			if err := json.Unmarshal([]byte(line), &got); err != nil {
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
			var stream, result, busy, idle bool
			for _, m := range got.IOPub {
				if !m.Parent {
					t.Fatalf("iopub message of another parent: %+v", m)
				}
				stream = stream || m.Type == "stream" && m.Text == "hello from jlab\n"
				result = result || m.Type == "execute_result" && m.Data == "42"
				busy = busy || m.Type == "status" && m.State == "busy"
				idle = idle || m.Type == "status" && m.State == "idle"
			}
			if !stream || !result || !busy || !idle {
				t.Fatalf("iopub received: %+v", got.IOPub)
			}
			// The client shut its kernel down: it is gone from the API.
			if st, b := httpDo(t, "GET", ts.URL+"/api/kernels/"+got.ID, "lab-token", ""); st != 404 {
				t.Fatalf("kernel after shutdown: %d %s", st, b)
			}
		})
	}
}
