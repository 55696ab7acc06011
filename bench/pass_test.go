// Package bench compares aiod's REST route with the floor under it: the
// same `pass` sent straight to an ipykernel over zmq4 with package kernel.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel"
)

const (
	startTimeout = 120 * time.Second
	callTimeout  = 60 * time.Second
	warmups      = 5 // uncounted calls of each kind before the rounds
)

// BenchmarkPassRESTvsFloor alternates, round by round, one `pass` sent
// straight to a kernel over zmq4 (the floor) and one `pass` through
// POST /v2/code/execute on a live gateway over loopback HTTP, so that
// machine noise hits both alike. Which of the two goes first alternates
// too. It reports p50/p90/p99 of each and rest/floor at p50; ns/op is the
// time of one round (both calls).
func BenchmarkPassRESTvsFloor(b *testing.B) {
	floor := startFloor(b)
	rest := startREST(b)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := floor.close(ctx); err != nil {
			b.Errorf("close kernel: %v", err)
		}
	})

	for range warmups { // the first REST call starts the session's kernel
		if _, err := floor.pass(); err != nil {
			b.Fatal(err)
		}
		if _, err := rest.pass(); err != nil {
			b.Fatal(err)
		}
	}

	var floorLat, restLat []time.Duration
	round := 0
	for b.Loop() {
		first, second := floor.pass, rest.pass
		if round%2 == 1 {
			first, second = second, first
		}
		d1, err := first()
		if err != nil {
			b.Fatal(err)
		}
		d2, err := second()
		if err != nil {
			b.Fatal(err)
		}
		if round%2 == 1 {
			d1, d2 = d2, d1
		}
		floorLat = append(floorLat, d1)
		restLat = append(restLat, d2)
		round++
	}

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fp := percentiles(floorLat, 50, 90, 99)
	rp := percentiles(restLat, 50, 90, 99)
	b.ReportMetric(ms(fp[0]), "floor-p50-ms")
	b.ReportMetric(ms(fp[1]), "floor-p90-ms")
	b.ReportMetric(ms(fp[2]), "floor-p99-ms")
	b.ReportMetric(ms(rp[0]), "rest-p50-ms")
	b.ReportMetric(ms(rp[1]), "rest-p90-ms")
	b.ReportMetric(ms(rp[2]), "rest-p99-ms")
	if fp[0] > 0 {
		b.ReportMetric(float64(rp[0])/float64(fp[0]), "rest/floor-p50")
	}
}

// percentiles returns the nearest-rank percentiles ps (each in (0, 100])
// of ds, which it leaves unchanged; zeros when ds is empty.
func percentiles(ds []time.Duration, ps ...float64) []time.Duration {
	out := make([]time.Duration, len(ps))
	if len(ds) == 0 {
		return out
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	for i, p := range ps {
		rank := int(float64(len(s))*p/100 + 0.9999999) // ceil, robust to float error
		rank = min(max(rank, 1), len(s))
		out[i] = s[rank-1]
	}
	return out
}

// floorClient runs `pass` straight on one kernel over zmq4.
type floorClient struct {
	k      *kernel.Kernel
	events chan doneMsg
}

type doneMsg struct {
	parent string
	reply  bool // execute_reply; else status idle
}

func startFloor(b *testing.B) *floorClient {
	b.Helper()
	spec, err := kernel.DefaultPythonSpec()
	if err != nil {
		b.Fatal(err)
	}
	f := &floorClient{events: make(chan doneMsg, 1024)}
	handler := func(m *jupyter.Message) {
		var e doneMsg
		switch {
		case m.Header.MsgType == "execute_reply":
			e = doneMsg{m.Parent.MsgID, true}
		case m.Header.MsgType == "status" && bytes.Contains(m.Content, []byte(`"idle"`)):
			e = doneMsg{m.Parent.MsgID, false}
		default:
			return
		}
		select { // the Handler must not block; the buffer is ample
		case f.events <- e:
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	f.k, err = kernel.Start(ctx, kernel.Options{Spec: spec, Handler: handler, StartTimeout: startTimeout})
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// pass sends `pass` and waits for both its execute_reply and its idle.
func (f *floorClient) pass() (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	id := jupyter.NewID()
	t0 := time.Now()
	if err := f.k.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: "pass", NoHistory: true}); err != nil {
		return 0, err
	}
	var reply, idle bool
	for !reply || !idle {
		select {
		case e := <-f.events:
			if e.parent == id {
				reply, idle = reply || e.reply, idle || !e.reply
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("floor: execution %s not complete within %s", id, callTimeout)
		}
	}
	return time.Since(t0), nil
}

func (f *floorClient) close(ctx context.Context) error {
	return f.k.Close(ctx)
}

// restClient runs `pass` through a live aiod daemon in one named session.
type restClient struct {
	g   *gw
	url string
}

var passBody = []byte(`{"language":"python","code":"pass","session_id":"bench"}`)

func startREST(b *testing.B) *restClient {
	b.Helper()
	g := startGateway(b, "AIO_CODE_BACKEND=kernel")
	return &restClient{g: g, url: g.base + "/v2/code/execute"}
}

// pass posts `pass` and reads the whole answer, which must be an ok result.
func (r *restClient) pass() (time.Duration, error) {
	t0 := time.Now()
	resp, err := r.g.client.Post(r.url, "application/json", bytes.NewReader(passBody))
	if err != nil {
		return 0, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	var env struct {
		Success bool `json:"success"`
		Data    struct {
			Status string `json:"status"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil || resp.StatusCode != http.StatusOK || !env.Success || env.Data.Status != "ok" {
		return 0, fmt.Errorf("rest: status %d, answer %q (%v)", resp.StatusCode, raw, err)
	}
	return d, nil
}
