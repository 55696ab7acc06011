package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestPprofListener: --pprof-addr serves heap and goroutine profiles on a
// loopback listener of its own; the API's port does not serve them, and
// the cmdline (which could hold secrets) is not served at all.
func TestPprofListener(t *testing.T) {
	t.Parallel()
	paddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	d := startDaemon(t, "--pprof-addr", paddr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	get := func(url string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get("http://" + paddr + "/debug/pprof/heap?debug=1"); st != 200 || !strings.Contains(body, "heap profile") {
		t.Errorf("heap profile: %d %.200s", st, body)
	}
	if st, body := get("http://" + paddr + "/debug/pprof/goroutine?debug=1"); st != 200 || !strings.Contains(body, "goroutine profile") {
		t.Errorf("goroutine profile: %d %.200s", st, body)
	}
	if st, _ := get("http://" + paddr + "/debug/pprof/cmdline"); st == 200 {
		t.Errorf("cmdline is served: %d", st)
	}
	if st, _ := get(d.url + "/debug/pprof/heap"); st == 200 {
		t.Errorf("the API's port serves profiles")
	}
}

// TestPprofRefusesNonLoopback: profiles carry no credentials, so aiod
// refuses to serve them beyond this machine.
func TestPprofRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0.0.0.0:6060", ":6060", "10.0.0.1:6060", "127.0.0.1"} {
		cmd := exec.Command(daemonBin, "--addr", "127.0.0.1:0", "--pprof-addr", v)
		cmd.Env = ownEnv(t)
		out, err := runBounded(t, cmd, 30*time.Second)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "pprof-addr") {
			t.Errorf("--pprof-addr %s: err %v, want exit 2 naming the flag; output:\n%s", v, err, out)
		}
	}
}

// TestGoProcsDefault: aiod runs its Go code on half the CPUs (at least
// one) unless GOMAXPROCS says otherwise (read from its own metrics).
func TestGoProcsDefault(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		want int
	}{{nil, max(1, runtime.NumCPU()/2)}, {[]string{"GOMAXPROCS=3"}, 3}} {
		d := startDaemonEnv(t, c.env, "--kernel-prewarm", "0")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		want := fmt.Sprintf("\ngo_sched_gomaxprocs_threads %d\n", c.want)
		if !strings.Contains(string(b), want) {
			t.Errorf("env %v: metrics lack %q", c.env, strings.TrimSpace(want))
		}
		d.stop()
	}
}
