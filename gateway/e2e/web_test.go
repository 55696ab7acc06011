package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiod/aiod/gateway"
	"github.com/aiod/aiod/gateway/gatewaytest"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// The notebook page's end-to-end tests: web/e2e/run.js drives the page in
// Debian's headless Chromium through playwright-core, against a live
// gateway. They are never skipped: a machine without Chromium or the npm
// packages fails them, with the line that installs what is missing.

// e2eScenarios are the scenarios TestWebE2E expects run.js to report.
var e2eScenarios = []string{"walkthrough", "cells", "streaming", "progress", "watch", "interrupt", "xss",
	"editor", "complete", "inspect", "markdown", "commands", "ipynb", "persist", "resume", "ansi", "layout", "reconnect", "terminal"}

// e2eShots are the screenshots TestWebE2E expects run.js to write.
var e2eShots = []string{"walkthrough.png", "streaming.png", "notebook.png", "narrow.png", "keys.png", "complete.png", "inspect.png", "terminal.png"}

// TestWebE2E runs every browser scenario against one gateway; the
// reconnect scenario goes through a proxy that cuts its connections. The
// screenshots go to a temporary folder, or to $AIOD_SCREENSHOTS (relative
// to the repository's root): AIOD_SCREENSHOTS=docs/screenshots refreshes
// the ones docs/notebook.md shows.
func TestWebE2E(t *testing.T) {
	t.Parallel()
	root := kerneltest.Chromium(t, "../..")
	kerneltest.LockWalkthrough(t) // the page's scenario uploads into /tmp/analysis
	ts := gatewaytest.Start(t, gateway.Config{})
	px := startDropProxy(t, ts.URL)
	shots := os.Getenv("AIOD_SCREENSHOTS")
	switch {
	case shots == "":
		shots = t.TempDir()
	case !filepath.IsAbs(shots):
		shots = filepath.Join(root, shots)
	}
	start := time.Now()
	runE2E(t, root, e2eScenarios, ts.URL+"/", shots, "--proxy="+px.URL+"/", "--drop="+px.DropURL)
	for _, name := range e2eShots {
		fi, err := os.Stat(filepath.Join(shots, name))
		switch {
		case err != nil:
			t.Errorf("screenshot %s: %v", name, err)
		case fi.ModTime().Before(start) || fi.Size() < 10_000:
			t.Errorf("screenshot %s was not written by this run (%d bytes, %s)", name, fi.Size(), fi.ModTime())
		}
	}
}

// TestWebE2ETokenBudget opens the page as /?token=T on a gateway with a
// token and a 1 MiB output budget, and runs a cell past that budget.
func TestWebE2ETokenBudget(t *testing.T) {
	t.Parallel()
	root := kerneltest.Chromium(t, "../..")
	const tok = "e2e-s3cret"
	ts := gatewaytest.Start(t, gateway.Config{Token: tok, OutputBudget: 1 << 20})
	runE2E(t, root, []string{"token", "truncation"}, ts.URL+"/?token="+tok, t.TempDir(), "--only=token,truncation")
}

// TestWebE2ETerminal runs the terminal panel's scenario alone (TestWebE2E
// runs it with the others).
func TestWebE2ETerminal(t *testing.T) {
	t.Parallel()
	root := kerneltest.Chromium(t, "../..")
	ts := gatewaytest.Start(t, gateway.Config{})
	runE2E(t, root, []string{"terminal"}, ts.URL+"/", t.TempDir(), "--only=terminal")
}

// TestWebE2ENative runs the completion and inspection scenario on a
// gateway whose Python is the native REPL (--code-backend native): Tab and
// Shift+Tab answered by rlcompleter and the driver's inspect.
func TestWebE2ENative(t *testing.T) {
	t.Parallel()
	root := kerneltest.Chromium(t, "../..")
	ts := gatewaytest.Start(t, gateway.Config{CodeBackend: "native"})
	runE2E(t, root, []string{"native"}, ts.URL+"/", t.TempDir(), "--only=native")
}

// runE2E runs web/e2e/run.js and turns each scenario it reports into a
// subtest. It fails when a scenario in want is missing from the report.
func runE2E(t *testing.T, root string, want []string, url, shots string, args ...string) {
	t.Helper()
	// A bound for a failure only (each scenario waits for its events):
	// the browser suite took 2.5 minutes beside the other packages' tests.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cmd, stderr := kerneltest.Node(ctx, root, append([]string{filepath.Join("web", "e2e", "run.js"), url, shots}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node web/e2e/run.js: %v", err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "ok "):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "ok "), " ")
			seen[name] = true
			t.Run(name, func(t *testing.T) { t.Log(line) })
		case strings.HasPrefix(line, "FAIL "):
			name, msg, _ := strings.Cut(strings.TrimPrefix(line, "FAIL "), ": ")
			seen[name] = true
			t.Run(name, func(t *testing.T) { t.Error(msg) })
		default:
			t.Log("run.js: " + line)
		}
	}
	err = cmd.Wait()
	if stderr.String() != "" {
		t.Logf("run.js stderr:\n%s", stderr.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("node web/e2e/run.js did not finish in time: %v", ctx.Err())
	}
	for _, name := range want {
		if !seen[name] {
			t.Errorf("scenario %s did not report", name)
		}
	}
	if err != nil && !t.Failed() {
		t.Errorf("node web/e2e/run.js: %v", err)
	}
}

// dropProxy forwards TCP connections to a gateway; a POST to DropURL cuts
// every connection through it at once, as a network failure would.
type dropProxy struct {
	URL     string // http://127.0.0.1:PORT, the gateway through the proxy
	DropURL string // POST here to cut every proxied connection

	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startDropProxy(t *testing.T, target string) *dropProxy {
	t.Helper()
	p := &dropProxy{target: strings.TrimPrefix(target, "http://"), conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.URL = "http://" + ln.Addr().String()
	p.DropURL = "http://" + cln.Addr().String() + "/drop"
	ctl := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST to drop every connection", http.StatusMethodNotAllowed)
			return
		}
		fmt.Fprintf(w, "dropped %d connections\n", p.drop())
	})}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		_ = ctl.Serve(cln)
	}()
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go p.pipe(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		ctl.Close()
		p.drop()
		p.wg.Wait()
	})
	return p
}

// pipe copies both ways until either side closes or drop cuts them.
func (p *dropProxy) pipe(c net.Conn) {
	defer p.wg.Done()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(u, c)
		u.Close()
	}()
	_, _ = io.Copy(c, u)
	c.Close()
	u.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// drop resets every proxied connection and returns how many there were.
func (p *dropProxy) drop() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not a polite FIN
		}
		c.Close()
	}
	return len(p.conns)
}
