package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/remote"
	"github.com/aiod/aiod/kernel/remote/remotetest"
)

// BenchmarkRemotePass measures, round by round in one run, a `pass` sent
// (1) through aiod's REST route to its embedded kernel, (2) through aiod's
// REST route to a kernel on a Jupyter Server on loopback
// (AIO_JUPYTER_ENDPOINT), and (3) straight to that Jupyter Server's kernel
// over its channels WebSocket with our remote client, no aiod in between.
func BenchmarkRemotePass(b *testing.B) {
	js := remotetest.Start(b)
	local := startGateway(b, "AIO_CODE_BACKEND=kernel")
	viaJS := startGateway(b, "AIO_JUPYTER_ENDPOINT="+js.URL, "AIO_JUPYTER_TOKEN="+js.Token)
	direct := startDirect(b, js)
	body := map[string]any{"language": "python", "code": "print(1)", "session_id": "bench"}
	calls := []func() (time.Duration, error){
		func() (time.Duration, error) { return local.exec(body, "1\n") },
		func() (time.Duration, error) { return viaJS.exec(body, "1\n") },
		direct.pass,
	}
	for range 5 { // warm-up: starts the kernels
		for _, c := range calls {
			if _, err := c(); err != nil {
				b.Fatal(err)
			}
		}
	}
	lat := make([][]time.Duration, len(calls))
	round := 0
	for b.Loop() {
		for i := range calls {
			k := (i + round) % len(calls) // rotate who goes first
			d, err := calls[k]()
			if err != nil {
				b.Fatal(err)
			}
			lat[k] = append(lat[k], d)
		}
		round++
	}
	p := func(ds []time.Duration) float64 { return float64(percentiles(ds, 50)[0]) / float64(time.Millisecond) }
	b.ReportMetric(p(lat[0]), "rest-embedded-p50-ms")
	b.ReportMetric(p(lat[1]), "rest-remote-p50-ms")
	b.ReportMetric(p(lat[2]), "jupyter-direct-p50-ms")
	b.ReportMetric(p(lat[1])/p(lat[0]), "remote/embedded")
	b.ReportMetric(p(lat[1])/p(lat[2]), "remote/direct")
}

// directClient runs `print(1)` on a Jupyter Server kernel with the remote
// client alone.
type directClient struct {
	k    *remote.Kernel
	done chan string // msg_id of each finished execution (reply and idle seen)
	out  map[string]*progress
}

type progress struct{ reply, idle bool }

func startDirect(b *testing.B, js *remotetest.Server) *directClient {
	c, err := remote.NewClient(js.URL, js.Token)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.CloseIdleConnections)
	d := &directClient{done: make(chan string, 16)}
	seen := map[string]*progress{}
	k, err := remote.Start(context.Background(), remote.Options{Client: c, Handler: func(m *jupyter.Message) {
		// Called from one reader goroutine: no lock needed for seen.
		id := m.Parent.MsgID
		p := seen[id]
		if p == nil {
			p = &progress{}
			seen[id] = p
		}
		switch {
		case m.Header.MsgType == "execute_reply":
			p.reply = true
		case m.Header.MsgType == "status" && idleStatus(m):
			p.idle = true
		}
		if p.reply && p.idle {
			delete(seen, id)
			d.done <- id
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	d.k = k
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = k.Close(ctx)
	})
	return d
}

func idleStatus(m *jupyter.Message) bool {
	var st struct {
		State string `json:"execution_state"`
	}
	return json.Unmarshal(m.Content, &st) == nil && st.State == "idle"
}

func (d *directClient) pass() (time.Duration, error) {
	id := jupyter.NewID()
	t0 := time.Now()
	if err := d.k.Execute(context.Background(), jupyter.ExecuteRequest{MsgID: id, Code: "print(1)"}); err != nil {
		return 0, err
	}
	select {
	case got := <-d.done:
		if got != id {
			return 0, fmt.Errorf("finished %s, want %s", got, id)
		}
		return time.Since(t0), nil
	case <-time.After(callTimeout):
		return 0, fmt.Errorf("direct: no reply within %s", callTimeout)
	}
}
