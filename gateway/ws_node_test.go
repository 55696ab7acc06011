package gateway

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// The same three-line check from a plain Node.js client (the ws package),
// which makes the code's gate when the first output reaches it.
func TestWSNodeClientStreamsThreeLines(t *testing.T) {
	t.Parallel()
	dir := jlabDir(t)
	ts := startServer(t, Config{})
	gate, hostGate := streamGate(t, ts, "default")
	code := threeLines(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "ws_client.js", ts.wsURL("/v2/code/ws"), code, hostGate)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node ws_client.js: %v\n%s", err, out)
	}
	var msgs []struct {
		At float64        `json:"at"`
		M  map[string]any `json:"m"`
	}
	if err := json.Unmarshal(out, &msgs); err != nil {
		t.Fatalf("client output is not JSON: %v\n%s", err, out)
	}
	var outAt []float64
	var result map[string]any
	for _, m := range msgs {
		switch m.M["type"] {
		case "output":
			if result != nil {
				t.Fatal("output after result")
			}
			o := m.M["output"].(map[string]any)
			if want := string(rune('0'+len(outAt))) + "\n"; o["text"] != want {
				t.Fatalf("output %d = %v, want text %q", len(outAt), o, want)
			}
			outAt = append(outAt, m.At)
		case "result":
			result = m.M
		case "accepted":
		default:
			t.Fatalf("unexpected message %v", m.M)
		}
	}
	if len(outAt) != 3 || result == nil {
		t.Fatalf("want 3 outputs then a result, got %v", msgs)
	}
	_, env, data := ts.exec(t, map[string]any{"language": "python", "code": code})
	got, want := mustJSONString(t, stripVolatile(result["data"].(map[string]any))), mustJSONString(t, stripVolatile(data))
	if got != want || result["success"] != env["success"] {
		t.Fatalf("node result\n%s\nREST\n%s", got, want)
	}
}
