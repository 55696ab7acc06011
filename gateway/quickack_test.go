package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTwoWriteClientNoStall: a client that sends a request's headers and
// its body in two writes with Nagle on (as httpx 0.23 does) on a
// kept-alive connection waits no delayed ACK more than one that sends them
// together.
// Without an immediate ACK from aiod the body waits for Linux's delayed
// ACK, about 40 ms a call.
func TestTwoWriteClientNoStall(t *testing.T) {
	ts := startServer(t, Config{})
	body := `{"language":"python","code":"pass","session_id":"quickack"}`
	if st, _, data := ts.exec(t, map[string]any{"language": "python", "code": "pass", "session_id": "quickack"}); st != 200 || data["status"] != "ok" {
		t.Fatalf("warm-up: %d %v", st, data)
	}
	head := fmt.Sprintf("POST /v2/code/execute HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		strings.TrimPrefix(ts.URL, "http://"), len(body))

	// aiod acknowledges at once only when a read would wait for more of
	// an unanswered request: the split client is the two-write one
	// (headers, then body) and one whose first write carries part of the
	// body too.
	one, two, split := dialNagle(t, ts), dialNagle(t, ts), dialNagle(t, ts)
	const rounds = 25
	var tOne, tTwo, tSplit []time.Duration
	for i := 0; i < rounds; i++ {
		tOne = append(tOne, roundTrip(t, one, head+body))
		tTwo = append(tTwo, roundTrip(t, two, head, body))
		tSplit = append(tSplit, roundTrip(t, split, head+body[:10], body[10:]))
	}
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	a, b, c := p50(tOne), p50(tTwo), p50(tSplit)
	t.Logf("p50 one write %v, two writes %v (%.2fx), headers with part of the body then the rest %v (%.2fx)",
		a, b, float64(b)/float64(a), c, float64(c)/float64(a))
	// Linux delays an ACK by 40 ms at least: a stall adds that to every
	// call. A bound of half of it tells a stall from the noise of a loaded
	// machine, which a ratio of two small medians does not.
	const stall = 20 * time.Millisecond
	if b-a > stall {
		t.Errorf("two-write client p50 %v is %v over the one-write client's %v: delayed ACK stall", b, b-a, a)
	}
	if c-a > stall {
		t.Errorf("split-body client p50 %v is %v over the one-write client's %v: delayed ACK stall", c, c-a, a)
	}
}

type nagleConn struct {
	net.Conn
	r *bufio.Reader
}

func dialNagle(t *testing.T, ts *testServer) *nagleConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(ts.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).SetNoDelay(false); err != nil { // Nagle on, as httpx
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &nagleConn{Conn: c, r: bufio.NewReader(c)}
}

// roundTrip writes parts one write each and reads one answer.
func roundTrip(t *testing.T, c *nagleConn, parts ...string) time.Duration {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	for _, p := range parts {
		if _, err := io.WriteString(c, p); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"status":"ok"`) {
		t.Fatalf("answer %d: %s", resp.StatusCode, raw)
	}
	return d
}
