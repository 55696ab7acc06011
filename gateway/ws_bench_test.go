package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/stream/execution"
)

// stampSub records, for each stream message of a session, how long after
// the kernel printed it aiod's multiplexer had it (the floor under the
// WebSocket delay).
type stampSub struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (s *stampSub) Deliver(ev execution.Event) {
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
	ts.Registry().Get("default", "python", "bench").Mux().Watch(mux)
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

// BenchmarkSSEvsWSDelay measures the first-output delay of the two ways a
// client follows an execution live, in one run on one execution: a
// POST /v2/code/execute streamed as Server-Sent Events, and a WebSocket
// resume of the same execution. The kernel prints b.N flushed lines 2 ms
// apart, each its own time.time(); both clients stamp each line as they read
// it. Reported: p50 and p99 per path, and the SSE p50 minus the WebSocket's.
func BenchmarkSSEvsWSDelay(b *testing.B) {
	ts := startServer(b, Config{})
	if _, env, _ := ts.exec(b, map[string]any{"language": "python", "code": "import time", "session_id": "bench"}); env["success"] != true {
		b.Fatalf("warm-up: %v", env)
	}
	stamps := func(text string, at time.Time, into *[]time.Duration) {
		for _, l := range strings.Fields(text) {
			if f, err := strconv.ParseFloat(l, 64); err == nil {
				*into = append(*into, at.Sub(time.Unix(0, int64(f*1e9))))
			}
		}
	}
	// The cell waits a second, so that the WebSocket follows it before the
	// first line: every line then reaches both clients live.
	code := fmt.Sprintf("time.sleep(1)\nfor i in range(%d):\n    print(repr(time.time()), flush=True)\n    time.sleep(0.002)", b.N)
	body, _ := json.Marshal(map[string]any{"language": "python", "code": code, "session_id": "bench", "execution_id": "sse-ws", "timeout": 600})
	b.ResetTimer()
	req, _ := http.NewRequest("POST", ts.URL+"/v2/code/execute", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := ts.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	c := dialWS(b, ts, nil)
	sendJSON(b, c, map[string]any{"type": "resume", "id": "ws", "execution_id": "sse-ws", "after": 0})
	var wsDelays, sseDelays []time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m := readJSON(b, c, 5*time.Minute)
			if m.typ() == "result" {
				return
			}
			if m.typ() == "output" {
				stamps(m.m["output"].(map[string]any)["text"].(string), m.at, &wsDelays)
			}
		}
	}()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		at := time.Now()
		if bytes.HasPrefix(line, []byte("event: result")) {
			break
		}
		if !bytes.HasPrefix(line, []byte("data: {\"type\":\"output\"")) {
			continue
		}
		var ev struct {
			Output struct {
				Text string `json:"text"`
			} `json:"output"`
		}
		if json.Unmarshal(line[len("data: "):], &ev) == nil {
			stamps(ev.Output.Text, at, &sseDelays)
		}
	}
	wg.Wait()
	b.StopTimer()
	if len(sseDelays) != b.N || len(wsDelays) != b.N {
		b.Fatalf("got %d SSE and %d WebSocket timestamps, want %d each", len(sseDelays), len(wsDelays), b.N)
	}
	sse50, ws50 := pct(sseDelays, 0.50), pct(wsDelays, 0.50)
	b.ReportMetric(sse50, "sse-p50-ms")
	b.ReportMetric(pct(sseDelays, 0.99), "sse-p99-ms")
	b.ReportMetric(ws50, "ws-p50-ms")
	b.ReportMetric(pct(wsDelays, 0.99), "ws-p99-ms")
	b.ReportMetric(sse50-ws50, "sse-minus-ws-p50-ms")
}
