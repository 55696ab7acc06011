package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/bench/compare"
	"github.com/goccy/go-json"
)

// gw is a live aiod daemon for the one-shot benchmarks.
type gw struct {
	base   string
	client *http.Client
}

// startGateway starts the aiod binary with the AIO_* settings in env and
// stops it (and every runtime it started) when the benchmark ends.
func startGateway(b *testing.B, env ...string) *gw {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := compare.StartDaemon(ctx, strings.ToLower(strings.ReplaceAll(b.Name(), "/", "-")), daemonBin, b.TempDir(),
		append([]string{fmt.Sprintf("AIO_KERNEL_START_TIMEOUT=%d", int(startTimeout/time.Second))}, env...)...)
	if err != nil {
		b.Fatal(err)
	}
	g := &gw{base: d.URL(), client: &http.Client{Timeout: callTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	b.Cleanup(func() {
		g.client.CloseIdleConnections()
		d.Stop()
	})
	return g
}

// exec posts one execute and checks that it printed want.
func (g *gw) exec(body map[string]any, want string) (time.Duration, error) {
	raw, _ := json.Marshal(body)
	t0 := time.Now()
	resp, err := g.client.Post(g.base+"/v2/code/execute", "application/json", bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	var env struct {
		Success bool `json:"success"`
		Data    struct {
			Stdout string `json:"stdout"`
		} `json:"data"`
	}
	if err != nil || json.Unmarshal(out, &env) != nil || !env.Success || env.Data.Stdout != want {
		return 0, fmt.Errorf("exec %s: status %d answer %.300q (%v)", raw, resp.StatusCode, out, err)
	}
	return d, nil
}

// ready waits until the named pool holds n runtimes.
func (g *gw) ready(name string, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := g.client.Get(g.base + "/v2/code/info")
		if err != nil {
			return err
		}
		var env struct {
			Data struct {
				Pools map[string]struct {
					Ready int `json:"ready"`
				} `json:"pools"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if err == nil && env.Data.Pools[name].Ready >= n {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("pool %s never reached %d ready", name, n)
}

func measure(b *testing.B, n int, f func() (time.Duration, error)) []time.Duration {
	b.Helper()
	ds := make([]time.Duration, 0, n)
	for range n {
		d, err := f()
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, d)
	}
	return ds
}

func p50ms(ds []time.Duration) float64 {
	return float64(percentiles(ds, 50)[0]) / float64(time.Millisecond)
}

// BenchmarkOneShot measures one-shot calls in one process run: Python cold
// (a kernel started per call) and from a prewarmed pool (AIO_KERNEL_PREWARM=2,
// waiting for the pool to refill between calls, as a steady trickle of calls
// would see it), against a session execute; JavaScript cold and prewarmed
// (AIO_CODE_PREWARM=2) against `node -e` started as a bare process. b.N is
// the number of calls of each kind.
func BenchmarkOneShot(b *testing.B) {
	n := max(b.N, 3)
	b.ResetTimer()
	cold := startGateway(b, "AIO_CODE_BACKEND=kernel")
	warm := startGateway(b, "AIO_CODE_BACKEND=kernel", "AIO_KERNEL_PREWARM=2", "AIO_CODE_PREWARM=2")
	py := map[string]any{"language": "python", "code": "print(1)"}
	js := map[string]any{"language": "javascript", "code": "console.log(1)"}
	sess := map[string]any{"language": "python", "code": "print(1)", "session_id": "bench"}
	if _, err := warm.exec(sess, "1\n"); err != nil { // starts the session's kernel
		b.Fatal(err)
	}

	session := measure(b, n, func() (time.Duration, error) { return warm.exec(sess, "1\n") })
	pyCold := measure(b, n, func() (time.Duration, error) { return cold.exec(py, "1\n") })
	pyWarm := measure(b, n, func() (time.Duration, error) {
		if err := warm.ready("kernel", 2); err != nil {
			return 0, err
		}
		return warm.exec(py, "1\n")
	})
	jsCold := measure(b, n, func() (time.Duration, error) { return cold.exec(js, "1\n") })
	jsWarm := measure(b, n, func() (time.Duration, error) {
		if err := warm.ready("javascript", 2); err != nil {
			return 0, err
		}
		return warm.exec(js, "1\n")
	})
	node := measure(b, n, func() (time.Duration, error) {
		t0 := time.Now()
		out, err := exec.Command("node", "-e", "console.log(1)").Output()
		if err != nil || string(out) != "1\n" {
			return 0, fmt.Errorf("node -e: %q %v", out, err)
		}
		return time.Since(t0), nil
	})
	pyProc := measure(b, n, func() (time.Duration, error) {
		t0 := time.Now()
		out, err := exec.Command("/usr/bin/python3", "-c", "print(1)").Output()
		if err != nil || string(out) != "1\n" {
			return 0, fmt.Errorf("python3 -c: %q %v", out, err)
		}
		return time.Since(t0), nil
	})
	b.StopTimer()
	b.ReportMetric(p50ms(session), "session-p50-ms")
	b.ReportMetric(p50ms(pyCold), "py-cold-p50-ms")
	b.ReportMetric(p50ms(pyWarm), "py-prewarm-p50-ms")
	b.ReportMetric(p50ms(pyProc), "python3-c-p50-ms")
	b.ReportMetric(p50ms(pyWarm)/p50ms(session), "py-prewarm/session")
	b.ReportMetric(p50ms(jsCold), "js-cold-p50-ms")
	b.ReportMetric(p50ms(jsWarm), "js-prewarm-p50-ms")
	b.ReportMetric(p50ms(node), "node-e-p50-ms")
	b.ReportMetric(p50ms(jsWarm)/p50ms(node), "js-prewarm/node-e")
	b.ReportMetric(p50ms(jsCold)/p50ms(node), "js-cold/node-e")
}
