// Package cluster measures what a replica of a cluster adds to a call it
// forwards to the caller's home (docs/scale-out.md): two aiod replicas over
// one nats-server with JetStream, one named session, and the same `pass`
// call sent alternately to the home and to the other replica.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/bench/compare"
)

// Config says how to run.
type Config struct {
	Rounds   int       // calls each way (default 300)
	Progress io.Writer // progress lines; nil for none
}

// Report is what a run measured, in milliseconds.
type Report struct {
	Rounds          int     `json:"rounds"`
	HomeP50         float64 `json:"home_p50_ms"`
	HomeP99         float64 `json:"home_p99_ms"`
	ForwardedP50    float64 `json:"forwarded_p50_ms"`
	ForwardedP99    float64 `json:"forwarded_p99_ms"`
	AddedP50        float64 `json:"added_p50_ms"`     // forwarded minus home, at p50
	RatioP50        float64 `json:"ratio_p50"`        // forwarded over home, at p50
	ForwardedByHome bool    `json:"answered_by_home"` // every forwarded answer named the home
}

// Run starts nats-server and two replicas under a temporary folder,
// measures, and stops everything.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Rounds <= 0 {
		cfg.Rounds = 300
	}
	logf := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	dir, err := os.MkdirTemp("", "aiobench-cluster-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	stopNATS, url, err := startNATS(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer stopNATS()
	bin, err := compare.BuildDaemon(ctx, dir)
	if err != nil {
		return nil, err
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("the benchmark's cluster secret\n"), 0o600); err != nil {
		return nil, err
	}
	var ds []*compare.Daemon
	defer func() {
		for _, d := range ds {
			d.Stop()
		}
	}()
	for _, name := range []string{"a", "b"} {
		d, err := compare.StartDaemon(ctx, "cluster-"+name, bin, dir, "AIO_CLUSTER_NATS="+url,
			"AIO_CLUSTER_SECRET_FILE="+secret, "AIO_KERNEL_PREWARM=0")
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	logf("cluster: nats-server and two replicas up; %d calls each way", cfg.Rounds)

	// The session's first call places the tenant and starts its kernel.
	client := &http.Client{Timeout: time.Minute}
	_, home, err := call(ctx, client, ds[0].URL())
	if err != nil {
		return nil, err
	}
	direct, other := ds[0], ds[1]
	if "http://"+home == ds[1].URL() {
		direct, other = ds[1], ds[0]
	}
	for range 20 { // warm both paths (connections, the forwarder's pool)
		if _, _, err := call(ctx, client, direct.URL()); err != nil {
			return nil, err
		}
		if _, _, err := call(ctx, client, other.URL()); err != nil {
			return nil, err
		}
	}
	r := &Report{Rounds: cfg.Rounds, ForwardedByHome: true}
	var homeMs, fwdMs []float64
	for i := range cfg.Rounds {
		// Alternate which goes first, so that neither always follows the
		// other's kernel work.
		order := []*compare.Daemon{direct, other}
		if i%2 == 1 {
			order = []*compare.Daemon{other, direct}
		}
		for _, d := range order {
			took, by, err := call(ctx, client, d.URL())
			if err != nil {
				return nil, err
			}
			if d == direct {
				homeMs = append(homeMs, took)
			} else {
				fwdMs = append(fwdMs, took)
				r.ForwardedByHome = r.ForwardedByHome && by == home
			}
		}
	}
	r.HomeP50, r.HomeP99 = percentile(homeMs, 50), percentile(homeMs, 99)
	r.ForwardedP50, r.ForwardedP99 = percentile(fwdMs, 50), percentile(fwdMs, 99)
	r.AddedP50 = r.ForwardedP50 - r.HomeP50
	if r.HomeP50 > 0 {
		r.RatioP50 = r.ForwardedP50 / r.HomeP50
	}
	logf("cluster: home p50 %.2f ms p99 %.2f ms; forwarded p50 %.2f ms p99 %.2f ms; added at p50 %+.2f ms (%.3f×)",
		r.HomeP50, r.HomeP99, r.ForwardedP50, r.ForwardedP99, r.AddedP50, r.RatioP50)
	return r, nil
}

// call runs `pass` in session "bench" through base and returns its time in
// milliseconds and the replica that answered.
func call(ctx context.Context, client *http.Client, base string) (float64, string, error) {
	body := []byte(`{"language":"python","session_id":"bench","code":"pass"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v2/code/execute", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var env struct {
		Success bool   `json:"success"`
		Message string `json:"message"`
	}
	err = json.NewDecoder(resp.Body).Decode(&env)
	took := float64(time.Since(t0)) / float64(time.Millisecond)
	if err != nil || resp.StatusCode != 200 || !env.Success {
		return 0, "", fmt.Errorf("pass through %s: %d %v %q", base, resp.StatusCode, err, env.Message)
	}
	return took, resp.Header.Get("AIO-Replica"), nil
}

// startNATS runs Debian's nats-server with JetStream on a free loopback
// port and waits until it takes connections.
func startNATS(ctx context.Context, dir string) (stop func(), url string, err error) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server"
	}
	port, err := compare.FreePort()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, "-js", "-sd", filepath.Join(dir, "nats"), "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start nats-server (apt-get install nats-server): %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() { _ = cmd.Process.Kill(); <-exited }
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return stop, "nats://" + addr, nil
		}
		select {
		case <-exited:
			return nil, "", fmt.Errorf("nats-server exited: %s", log.String())
		case <-ctx.Done():
			stop()
			return nil, "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, "", errors.New("nats-server took no connection within 30 s")
		}
	}
}

// percentile is the p-th percentile of v (nearest rank).
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
