package gateway

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiod/aiod/stream"
	"github.com/goccy/go-json"
)

// stampSub records, for each stream message of a session, how long after
// the kernel printed it aiod's multiplexer had it (the floor under the
// WebSocket delay).
type stampSub struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (s *stampSub) Deliver(ev stream.Event) {
	if ev.Msg == nil || ev.Msg.Header.MsgType != "stream" {
		return
	}
	now := time.Now()
	var c struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(ev.Msg.Content, &c) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range strings.Fields(c.Text) {
		if f, err := strconv.ParseFloat(l, 64); err == nil {
			s.delays = append(s.delays, now.Sub(time.Unix(0, int64(f*1e9))))
		}
	}
}

func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[int(p*float64(len(d)-1))]) / 1e6
}

// BenchmarkWSStreamDelay measures the delay from a kernel printing a
// flushed line (its time.time() is the line) to the WebSocket client
// reading the output message: p50 and p99 in ms, with the same delay up to
// aiod's multiplexer for comparison. One output per iteration, 2 ms apart.
func BenchmarkWSStreamDelay(b *testing.B) {
	ts := startServer(b, Config{})
	if _, env, _ := ts.exec(b, map[string]any{"language": "python", "code": "import time", "session_id": "bench"}); env["success"] != true {
		b.Fatalf("warm-up: %v", env)
	}
	mux := &stampSub{}
	ts.Registry().Get("python", "bench").Mux().Watch(mux)
	c := dialWS(b, ts, nil)
	code := fmt.Sprintf("for i in range(%d):\n    print(repr(time.time()), flush=True)\n    time.sleep(0.002)", b.N)
	b.ResetTimer()
	sendJSON(b, c, map[string]any{"type": "execute", "id": "bench", "language": "python", "code": code, "session_id": "bench", "timeout": 600})
	var delays []time.Duration
	for {
		m := readJSON(b, c, 5*time.Minute)
		if m.typ() == "result" {
			break
		}
		if m.typ() != "output" {
			continue
		}
		text, _ := m.m["output"].(map[string]any)["text"].(string)
		for _, l := range strings.Fields(text) {
			if f, err := strconv.ParseFloat(l, 64); err == nil {
				delays = append(delays, m.at.Sub(time.Unix(0, int64(f*1e9))))
			}
		}
	}
	b.StopTimer()
	if len(delays) != b.N {
		b.Fatalf("got %d timestamps, want %d", len(delays), b.N)
	}
	b.ReportMetric(pct(delays, 0.50), "ws-p50-ms")
	b.ReportMetric(pct(delays, 0.99), "ws-p99-ms")
	mux.mu.Lock()
	b.ReportMetric(pct(mux.delays, 0.50), "mux-p50-ms")
	b.ReportMetric(pct(mux.delays, 0.99), "mux-p99-ms")
	mux.mu.Unlock()
}
