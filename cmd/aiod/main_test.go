package main

// These tests run the real daemon binary, with real Jupyter kernels, and
// need Linux (/proc) plus a kernelspec with ipykernel on the host.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aiod/aiod/gateway"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// daemonBin is the aiod binary built once by TestMain.
var daemonBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aiod-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		os.Exit(1)
	}
	daemonBin = filepath.Join(dir, "aiod")
	build := exec.Command("go", "build", "-o", daemonBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "go build aiod:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := kerneltest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a bytes.Buffer safe for the exec copier and the test.
type syncBuffer = kerneltest.SyncBuffer

// daemon is one running aiod process.
type daemon struct {
	t      testing.TB
	cmd    *exec.Cmd
	url    string
	stderr *syncBuffer
	client *http.Client
	done   chan struct{} // closed when the process has been waited for
	err    error         // Wait's error, set before done closes
	token  string        // sent as Authorization: Bearer by do, when set

	mu   sync.Mutex
	pids map[int]bool // runtime pids seen, killed in cleanup if still alive
}

// cleanEnv is the test's environment without AIO_* settings (nor the AIO
// sandbox's JWT_PUBLIC_KEY and TICKET_TTL_SECONDS) or Go GC tuning, so a
// variable on the host cannot change the daemon under test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIO_") && !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOMAXPROCS=") &&
			!strings.HasPrefix(kv, "JWT_PUBLIC_KEY=") && !strings.HasPrefix(kv, "TICKET_TTL_SECONDS=") {
			env = append(env, kv)
		}
	}
	return env
}

// boundSocket binds a listening TCP socket on addr (port 0: any) and
// returns it as a file to pass to a daemon, with the address it got.
func boundSocket(t testing.TB, addr string) (*os.File, string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // the file is a copy of the socket
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	return f, ln.Addr().String()
}

// activated is the command running bin with args that hands it sock as
// socket activation does (descriptor 3, LISTEN_PID its pid: a shell sets
// it, then becomes bin); the caller adds LISTEN_FDS=1 to its environment.
func activated(bin string, sock *os.File, args ...string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", append([]string{"-c", `export LISTEN_PID=$$; exec "$0" "$@"`, bin}, args...)...)
	cmd.ExtraFiles = []*os.File{sock}
	return cmd
}

// ownEnv is cleanEnv with a state directory and tenant uids of the test's
// own, for a daemon started by hand: tests run at once, and two daemons
// refuse to share either.
func ownEnv(t testing.TB) []string {
	return append(cleanEnv(), "AIO_STATE_DIR="+t.TempDir(), "AIO_TENANT_UIDS="+kerneltest.UIDRangeFlag(t))
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// startDaemon runs the binary on a free loopback port, waits until
// /healthz answers 200, and stops it (and any runtime it left) when the
// test ends. A lost race for the port is retried.
func startDaemon(t testing.TB, args ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, nil, args...)
}

// workingDir, followed by a folder, in startDaemonEnv's env is the folder
// the daemon starts in (the test's own by default), not a variable.
const workingDir = "\x00cwd="

// startDaemonEnv is startDaemon with env (KEY=VALUE) added to the daemon's
// environment.
func startDaemonEnv(t testing.TB, env []string, args ...string) *daemon {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		d, err := tryStartDaemon(t, args, env...)
		if err == nil {
			return d
		}
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatal(lastErr)
	return nil
}

// hasStateDir says whether a test gave the daemon a state directory; each
// daemon a test starts gets its own otherwise (they are locked), and its
// own tenant uids (daemons refuse to share them).
func hasStateDir(args, env []string) bool {
	return hasSetting(args, env, "--state-dir", "AIO_STATE_DIR=")
}

func hasSetting(args, env []string, flag, variable string) bool {
	for _, a := range append(append([]string{}, args...), env...) {
		if strings.HasPrefix(a, flag) || strings.HasPrefix(a, variable) {
			return true
		}
	}
	return false
}

func tryStartDaemon(t testing.TB, args []string, env ...string) (*daemon, error) {
	kerneltest.SkipShort(t, "the daemon")
	d := &daemon{
		t:      t,
		stderr: &syncBuffer{},
		client: &http.Client{Transport: &http.Transport{}},
		done:   make(chan struct{}),
		pids:   map[int]bool{},
	}
	// The daemon serves a socket the test bound (socket activation), so
	// its address is known before it starts and no other process can take
	// the port in between.
	sock, addr := boundSocket(t, "127.0.0.1:0")
	d.url = "http://" + addr
	d.cmd = activated(daemonBin, sock, args...)
	var daemonEnv []string
	for _, e := range env {
		if dir, ok := strings.CutPrefix(e, workingDir); ok {
			d.cmd.Dir = dir
		} else {
			daemonEnv = append(daemonEnv, e)
		}
	}
	env = daemonEnv
	d.cmd.Env = append(append(cleanEnv(), env...), "LISTEN_FDS=1")
	if !hasStateDir(args, env) {
		d.cmd.Env = append(d.cmd.Env, "AIO_STATE_DIR="+t.TempDir())
	}
	if !hasSetting(args, env, "--tenant-uids", "AIO_TENANT_UIDS=") {
		d.cmd.Env = append(d.cmd.Env, "AIO_TENANT_UIDS="+kerneltest.UIDRangeFlag(t))
	}
	d.cmd.Stdout, d.cmd.Stderr = d.stderr, d.stderr
	err := d.cmd.Start()
	sock.Close() // the daemon has its own copy
	if err != nil {
		return nil, err
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(d.stop)

	deadline := time.Now().Add(60 * time.Second)
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer probe.CloseIdleConnections()
	for {
		resp, err := probe.Get(d.url + "/healthz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d, nil
			}
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("aiod exited before serving (%v); stderr:\n%s", d.err, d.stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("aiod not healthy within 60s; stderr:\n%s", d.stderr)
		}
	}
}

// stop ends the daemon if it still runs (SIGTERM, then SIGKILL), then
// kills any runtime it was seen with that outlived it. A daemon that does
// not stop by itself within 30 s of SIGTERM (its --shutdown-timeout is
// 20 s) fails the test: an unclean stop leaves what a clean one removes.
func (d *daemon) stop() {
	select {
	case <-d.done:
	default:
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
			d.t.Errorf("aiod did not stop within 30 s of SIGTERM and was killed; its log:\n%s", d.stderr)
		}
	}
	d.client.CloseIdleConnections()
	d.mu.Lock()
	defer d.mu.Unlock()
	for pid := range d.pids {
		if syscall.Kill(pid, 0) == nil {
			d.t.Errorf("runtime pid %d outlived the daemon; killing its group", pid)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// logged reports whether the daemon's log has sub, waiting up to 10 s for
// it: a line reaches the test through a pipe, maybe after the answer to
// the request that caused it.
func (d *daemon) logged(sub string) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if strings.Contains(d.stderr.String(), sub) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// execData is the part of POST /v2/code/execute's data the tests read.
type execData struct {
	Status    string `json:"status"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
}

type envelope[T any] struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
	Data    T      `json:"data"`
}

// do sends a request with a JSON body (nil for none) and decodes the
// answer's envelope into out.
func (d *daemon) do(ctx context.Context, method, path string, body any, out any) {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			d.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, rd)
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v; daemon stderr:\n%s", method, path, err, d.stderr)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		d.t.Fatalf("%s %s: status %d: %.2000s; daemon stderr:\n%s", method, path, resp.StatusCode, raw, d.stderr)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		d.t.Fatalf("%s %s: decode: %v: %.2000s", method, path, err, raw)
	}
}

// execute runs Python code, in session sid ("" for a one-shot call).
func (d *daemon) execute(ctx context.Context, sid, code string, timeout float64) execData {
	d.t.Helper()
	body := map[string]any{"language": "python", "code": code, "timeout": timeout}
	if sid != "" {
		body["session_id"] = sid
	}
	var env envelope[execData]
	d.do(ctx, http.MethodPost, "/v2/code/execute", body, &env)
	if !env.Success || env.Data.Status != "ok" {
		d.t.Fatalf("execute %q in %q: success=%v message=%q status=%q stderr=%.500q", code, sid,
			env.Success, env.Message, env.Data.Status, env.Data.Stderr)
	}
	return env.Data
}

// sessionPIDs returns the runtime pid of every listed session by id, and
// remembers them for cleanup.
func (d *daemon) sessionPIDs(ctx context.Context) map[string]int {
	d.t.Helper()
	var env envelope[struct {
		Sessions []struct {
			SessionID string `json:"session_id"`
			Running   bool   `json:"running"`
			PID       int    `json:"pid"`
		} `json:"sessions"`
	}]
	d.do(ctx, http.MethodGet, "/v2/code/sessions", nil, &env)
	out := map[string]int{}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range env.Data.Sessions {
		if s.Running && s.PID > 0 {
			out[s.SessionID] = s.PID
			d.pids[s.PID] = true
		}
	}
	return out
}

// wait waits for the daemon to exit and returns its exit code.
func (d *daemon) wait(timeout time.Duration) int {
	d.t.Helper()
	select {
	case <-d.done:
	case <-time.After(timeout):
		d.t.Fatalf("aiod did not exit within %v; stderr:\n%s", timeout, d.stderr)
	}
	var ee *exec.ExitError
	switch {
	case d.err == nil:
		return 0
	case errors.As(d.err, &ee):
		return ee.ExitCode() // -1 when killed by a signal
	default:
		d.t.Fatalf("wait for aiod: %v", d.err)
		return -1
	}
}

// vmRSS reads a process's resident set size in bytes.
func vmRSS(pid int) (int64, error) { return procStatus(pid, "VmRSS") }

// vmHWM reads a process's peak resident set size in bytes, which catches
// a spike between two samples.
func vmHWM(pid int) (int64, error) { return procStatus(pid, "VmHWM") }

// procStatus reads one "kB" field of /proc/PID/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			fs := strings.Fields(rest) // "12345 kB"
			if len(fs) != 2 || fs[1] != "kB" {
				return 0, fmt.Errorf("odd %s line %q", field, sc.Text())
			}
			kb, err := strconv.ParseInt(fs[0], 10, 64)
			return kb << 10, err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// TestSIGTERMLeavesNoKernel stops a daemon with two live kernels by SIGTERM
// and checks that it exits 0 and that both kernels are gone.
func TestSIGTERMLeavesNoKernel(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--code-backend", "kernel")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	for _, sid := range []string{"s1", "s2"} {
		d.execute(ctx, sid, "x = 1", 60)
	}
	pids := d.sessionPIDs(ctx)
	for _, sid := range []string{"s1", "s2"} {
		if pids[sid] <= 0 {
			t.Fatalf("session %s has no running pid in %v", sid, pids)
		}
		if err := syscall.Kill(pids[sid], 0); err != nil {
			t.Fatalf("kernel of %s (pid %d) not alive before SIGTERM: %v", sid, pids[sid], err)
		}
	}
	if pids["s1"] == pids["s2"] {
		t.Fatalf("sessions share pid %d; want two kernels", pids["s1"])
	}

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("aiod exit code %d after SIGTERM, want 0; stderr:\n%s", code, d.stderr)
	}
	for sid, pid := range pids {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := syscall.Kill(pid, 0)
			if errors.Is(err, syscall.ESRCH) {
				break
			}
			if time.Now().After(deadline) {
				stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				t.Errorf("kernel of %s (pid %d) still exists 30s after aiod exited (kill: %v, stat: %q); stderr:\n%s",
					sid, pid, err, stat, d.stderr)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestSIGTERMEndsOneShotInFlight stops a daemon by SIGTERM while a REST
// one-shot call sleeps for 600 s in its temporary kernel: the daemon ends the
// call (it answers that aiod shut down), exits well within its shutdown
// timeout, and leaves no process behind.
func TestSIGTERMEndsOneShotInFlight(t *testing.T) {
	t.Parallel()
	// Long enough that half of it tells a daemon that ends the call from
	// one that waits the timeout out, on a loaded machine too (10.6 s
	// beside the suite, where 10 s was half of 20).
	const shutdownTimeout = 60 * time.Second
	d := startDaemon(t, "--code-backend", "kernel", "--shutdown-timeout", "60")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	type answer struct {
		status int
		body   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{"language": "python", "code": "import time\nprint('sleeping', flush=True)\ntime.sleep(600)", "timeout": 900, "execution_id": "in-flight"})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v2/code/execute", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		resp, err := d.client.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		answered <- answer{status: resp.StatusCode, body: string(raw)}
	}()

	// The call has reached time.sleep once its output is in (404 until
	// the call has come in); its kernel is among the daemon's descendants
	// then (a forked kernel's command line is its template's, so it is not
	// told by its command line).
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, ex := d.getJSON(ctx, "/v2/code/executions/in-flight")
		data, _ := ex["data"].(map[string]any)
		if n, _ := data["last_seq"].(float64); st == http.StatusOK && data["state"] == "running" && n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the one-shot never printed: %d %v", st, ex)
		}
	}
	kids := kerneltest.Descendants(d.cmd.Process.Pid)
	if len(kids) == 0 {
		t.Fatalf("no process below the daemon while its one-shot runs; stderr:\n%s", d.stderr)
	}
	d.mu.Lock()
	for _, p := range kids {
		d.pids[p] = true
	}
	d.mu.Unlock()

	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(shutdownTimeout); code != 0 {
		t.Fatalf("aiod exit code %d after SIGTERM, want 0; stderr:\n%s", code, d.stderr)
	}
	took := time.Since(start)
	// The drain gives requests 5 s; ending the call and its kernel takes
	// a few seconds more. Before the one-shot was registered, the daemon
	// waited out the whole shutdown timeout.
	if took > shutdownTimeout/2 {
		t.Errorf("aiod took %s to exit after SIGTERM with a one-shot in flight, want under %s", took, shutdownTimeout/2)
	}
	select {
	case a := <-answered:
		if a.err == nil && !strings.Contains(a.body, "shut down") && !strings.Contains(a.body, "shutting down") && !strings.Contains(a.body, "cancelled") {
			t.Errorf("the call in flight answered %d %s; want it to say that aiod shut down", a.status, a.body)
		}
	case <-time.After(5 * time.Second):
		t.Error("the call in flight got no answer and no error after the daemon exited")
	}
	for _, p := range kids {
		if !kerneltest.Ends(p, 30*time.Second) {
			t.Errorf("process %d (%s) outlived the daemon by 30 s", p, kerneltest.Cmdline(p))
		}
	}
	t.Logf("aiod exited %s after SIGTERM", took.Round(time.Millisecond))
}

// TestRetainedExecutionsStayWithinTheirBound runs 1,000 executions whose
// outputs and results the daemon keeps, about 150 KiB each, with
// --execution-retention-bytes 160 MiB (above the 64 MiB --memory-limit, so
// that the bound, not the limit, is what is measured): the store holds all
// of them within the bound, and the daemon's resident memory stays within
// the bound plus 32 MiB.
func TestRetainedExecutionsStayWithinTheirBound(t *testing.T) {
	t.Parallel()
	const bound = 160 << 20
	d := startDaemon(t, "--execution-retention-bytes", strconv.Itoa(bound))
	// A bound on a stuck daemon, not on speed: 1,000 calls in a row took
	// over 5 minutes beside two other runs of the suite.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	body := func(i int) map[string]any {
		return map[string]any{"language": "javascript", "session_id": "keep", "execution_id": fmt.Sprintf("kept-%d", i),
			"code": fmt.Sprintf("console.log('%d'.padEnd(75000, '.'))", i)}
	}
	peak := int64(0)
	for i := range 1000 {
		var env envelope[execData]
		d.do(ctx, http.MethodPost, "/v2/code/execute", body(i), &env)
		if !env.Success || !strings.HasPrefix(env.Data.Stdout, strconv.Itoa(i)) {
			t.Fatalf("execution %d: %v %q", i, env.Message, env.Data.Stdout[:min(40, len(env.Data.Stdout))])
		}
		if i%50 == 49 {
			if rss, err := vmRSS(d.cmd.Process.Pid); err == nil {
				peak = max(peak, rss)
			}
		}
	}
	// The store writes through to the state directory: the bound applies
	// there, and memory keeps a cache of the latest.
	var info envelope[struct {
		Executions struct {
			Finished      int   `json:"finished"`
			FinishedBytes int64 `json:"finished_bytes"`
			Evicted       int   `json:"evicted"`
			Stored        int   `json:"stored"`
			StoredBytes   int64 `json:"stored_bytes"`
		} `json:"executions"`
	}]
	for range 50 { // the writer commits every 50 ms
		d.do(ctx, http.MethodGet, "/v2/code/info", nil, &info)
		if info.Data.Executions.Stored >= 1000 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := info.Data.Executions
	if st.StoredBytes > bound || st.Stored != 1000 || st.Evicted != 0 || st.FinishedBytes > 32<<20 {
		t.Fatalf("store after 1,000 executions: %+v (bound %d)", st, bound)
	}
	var first envelope[execData]
	d.do(ctx, http.MethodGet, "/v2/code/executions/kept-0", nil, &first)
	if !strings.HasPrefix(first.Data.Stdout, "0....") {
		t.Fatalf("the first execution, out of the cache: %.100q", first.Data.Stdout)
	}
	hwm, err := vmHWM(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("1,000 executions: %d retained in %s on disk, %s cached (%d evicted); daemon RSS peak %s (sampled), VmHWM %s",
		st.Stored, mib(st.StoredBytes), mib(st.FinishedBytes), st.Evicted, mib(peak), mib(hwm))
	if limit := int64(bound + 32<<20); hwm > limit {
		t.Fatalf("daemon VmHWM %s passed the retention bound plus 32 MiB (%s)", mib(hwm), mib(limit))
	}
}

// TestDaemonRSSBoundedDuringFlood runs a one-shot call printing 200 MB and
// samples the daemon's resident memory while it runs: it stays within the
// soft memory limit (--memory-limit, 64 MiB) plus what the daemon had
// outside its heap when idle, and 24 MiB for a collector that lags behind
// on a loaded machine (150.1 MiB seen there against 140 idle); a daemon
// that held the flood would pass 200 MiB.
func TestDaemonRSSBoundedDuringFlood(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--code-backend", "kernel")
	pid := d.cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	d.execute(ctx, "warm", "x = 1", 60)
	d.sessionPIDs(ctx)
	idle, err := vmRSS(pid)
	if err != nil {
		t.Fatal(err)
	}

	var peak int64
	var samples int
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if n, err := vmRSS(pid); err == nil {
				samples++
				peak = max(peak, n)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	const flood = "import sys\nline = 'y' * 1023 + '\\n'\nfor i in range(200 * 1024):\n    sys.stdout.write(line)\nprint('THE END')"
	start := time.Now()
	body, _ := json.Marshal(map[string]any{"language": "python", "code": flood, "timeout": 300})
	a := d.postRaw(ctx, "/v2/code/execute", string(body))
	took := time.Since(start)
	var answer envelope[execData]
	if err := json.Unmarshal([]byte(a.raw), &answer); err != nil || a.status != 200 || !answer.Success {
		t.Fatalf("the flood's answer: %d %v %.500s", a.status, err, a.raw)
	}
	res := answer.Data
	// The answer is the output budget (8 MiB by default, stream text
	// counted twice: in outputs and in stdout) and a little: the stream's
	// tail past it (a 32nd of the budget, twice) and the JSON.
	if budget := 8 << 20; len(a.raw) > budget+budget/16+budget/64 {
		t.Errorf("a 200 MB print answered %d bytes, want at most the output budget %d, its tails and a 64th", len(a.raw), budget)
	}
	close(stop)
	<-sampled
	after, _ := vmRSS(pid)
	hwm, err := vmHWM(pid)
	if err != nil {
		t.Fatal(err)
	}

	t.Logf("daemon VmRSS: idle %s, sampled peak %s during flood (%d samples every 20ms, %v), VmHWM %s, %s after; stdout kept %d bytes, answer %d bytes",
		mib(idle), mib(peak), samples, took.Round(time.Millisecond), mib(hwm), mib(after), len(res.Stdout), len(a.raw))
	if samples == 0 {
		t.Error("no RSS sample taken during the flood")
	}
	peak = max(peak, hwm)
	if !res.Truncated {
		t.Errorf("truncated = false for 200 MB of output (stdout kept %d bytes)", len(res.Stdout))
	}
	if !strings.HasSuffix(res.Stdout, "THE END\n") {
		t.Errorf("stdout does not end with THE END: ...%q", res.Stdout[max(0, len(res.Stdout)-200):])
	}
	if bound := 64<<20 + idle + 24<<20; peak >= bound {
		t.Errorf("daemon peak VmRSS %s during a 200 MB flood, want < %s: the default --memory-limit (64 MiB), %s idle, 24 MiB", mib(peak), mib(bound), mib(idle))
	}
}

// TestHelpListsEveryFlag checks that --help exits 0 and names every flag
// with its variable.
func TestHelpListsEveryFlag(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(daemonBin, "--help")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("aiod --help: %v; output:\n%s", err, out)
	}
	help := string(out)
	sets := (&options{}).settings()
	if len(sets) == 0 {
		t.Fatal("no settings")
	}
	for _, s := range sets {
		re := regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(s.flag) + `\b`)
		if !re.MatchString(help) {
			t.Errorf("--help does not list flag --%s", s.flag)
		}
		if !strings.Contains(help, s.env) {
			t.Errorf("--help does not mention %s (of --%s)", s.env, s.flag)
		}
	}
	// Flags that are no setting (the README names --version).
	for _, f := range []string{"--version", "--help"} {
		if !regexp.MustCompile(`(?m)^\s+` + f + `$`).MatchString(help) {
			t.Errorf("--help does not list %s", f)
		}
	}
	if t.Failed() {
		t.Logf("help output:\n%s", help)
	}
}

// TestBadFlagFails checks that an invalid --code-backend stops the daemon
// with an error naming the value.
func TestBadFlagFails(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(daemonBin, "--code-backend", "bogus", "--addr", "127.0.0.1:0")
	cmd.Env = ownEnv(t)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		out, err = cmd.CombinedOutput()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("aiod --code-backend bogus still running after 30s; output:\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
		t.Fatalf("aiod --code-backend bogus: err %v, want a non-zero exit; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), `"bogus"`) {
		t.Errorf("error does not name the value bogus:\n%s", out)
	}
}

// fakeLookup is an environment made of a map.
func fakeLookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

// TestParseOptionsPrecedence checks flag > AIO_* variable > default.
func TestParseOptionsPrecedence(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"AIO_ADDR":            "127.0.0.1:2000",
		"AIO_DEFAULT_TIMEOUT": "5",
		"AIO_LOG_LEVEL":       "warn",
		"AIO_CODE_BACKEND":    "native",
		"AIO_OUTPUT_BUDGET":   "", // empty counts as unset
	}
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want options
	}{
		{"defaults", nil, nil, options{
			addr: "127.0.0.1:18091", codeBackend: "auto", defaultTimeout: 30 * time.Second,
			logLevel: slog.LevelInfo, outputBudget: 8 << 20,
		}},
		{"env", nil, env, options{
			addr: "127.0.0.1:2000", codeBackend: "native", defaultTimeout: 5 * time.Second,
			logLevel: slog.LevelWarn, outputBudget: 8 << 20,
		}},
		{"flag", []string{"--addr", "127.0.0.1:3000", "--default-timeout", "1.5", "--log-level", "debug",
			"--code-backend", "kernel", "--output-budget", "1024"}, env, options{
			addr: "127.0.0.1:3000", codeBackend: "kernel", defaultTimeout: 1500 * time.Millisecond,
			logLevel: slog.LevelDebug, outputBudget: 1024,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			o, err := parseOptions(c.args, fakeLookup(c.env), &out)
			if err != nil {
				t.Fatalf("parseOptions: %v (output %q)", err, out.String())
			}
			got := options{addr: o.addr, codeBackend: o.codeBackend, defaultTimeout: o.defaultTimeout,
				logLevel: o.logLevel, outputBudget: o.outputBudget}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
			// Settings no source touched keep their defaults.
			if o.maxTimeout != 900*time.Second || o.shutdownTimeout != 20*time.Second || o.logFormat != "text" {
				t.Errorf("defaults: max-timeout %v, shutdown-timeout %v, log-format %q",
					o.maxTimeout, o.shutdownTimeout, o.logFormat)
			}
		})
	}

	t.Run("bad env names its variable", func(t *testing.T) {
		_, err := parseOptions(nil, fakeLookup(map[string]string{"AIO_MAX_TIMEOUT": "-1"}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "AIO_MAX_TIMEOUT") {
			t.Errorf("err %v, want one naming AIO_MAX_TIMEOUT", err)
		}
	})
}

// TestVersion checks --version on the test binary (built without VCS
// information: "commit unknown"), then on a binary built with -buildvcs=true
// from a clone of this repository's HEAD, which must name that commit.
func TestVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(daemonBin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("aiod --version: %v: %s", err, out)
	}
	want := "aiod " + gateway.Version + " (" + runtime.Version() + ", commit "
	if !strings.HasPrefix(string(out), want) {
		t.Fatalf("aiod --version printed %q, want it to start with %q", out, want)
	}
	dir := t.TempDir()
	if b, err := exec.Command("git", "clone", "--quiet", "--shared", "--no-checkout", "../..", dir+"/src").CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v: %s", err, b)
	}
	checkout := exec.Command("git", "checkout", "--quiet", "HEAD")
	checkout.Dir = dir + "/src"
	if b, err := checkout.CombinedOutput(); err != nil {
		t.Fatalf("git checkout: %v: %s", err, b)
	}
	head, err := exec.Command("git", "-C", dir+"/src", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-buildvcs=true", "-o", dir+"/aiod", "./cmd/aiod")
	build.Dir = dir + "/src"
	build.Env = append(os.Environ(), "GOFLAGS=-trimpath") // the clone's folder then misses no cache
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v: %s", err, b)
	}
	out, err = exec.Command(dir+"/aiod", "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("aiod --version: %v: %s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), want+strings.TrimSpace(string(head))+")"; got != want {
		t.Fatalf("a VCS build prints %q, want %q", got, want)
	}
}

// TestSocketActivation: given sockets by a supervisor (LISTEN_FDS,
// LISTEN_PID), aiod serves the one passed and says so, whatever --addr
// says; two are refused at start with exit code 2, before anything runs.
func TestSocketActivation(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--addr", "127.0.0.1:1") // port 1 would fail if aiod bound it
	if !d.logged("socket_activation=true") {
		t.Errorf("no socket_activation=true in the log:\n%s", d.stderr)
	}
	a, _ := boundSocket(t, "127.0.0.1:0")
	b, _ := boundSocket(t, "127.0.0.1:0")
	cmd := activated(daemonBin, a)
	cmd.ExtraFiles = append(cmd.ExtraFiles, b)
	cmd.Env = append(ownEnv(t), "LISTEN_FDS=2")
	out, err := cmd.CombinedOutput()
	a.Close()
	b.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "LISTEN_FDS passed 2 descriptors") {
		t.Errorf("two sockets: %v\n%s", err, out)
	}
}

// TestSoftLimitNeverUnderTheLiveHeap: the soft memory limit is
// --memory-limit while aiod holds little, follows what it holds, and never
// sits under twice the live heap's part beyond buffers (and an eighth of
// those), where the GC would run back to back.
func TestSoftLimitNeverUnderTheLiveHeap(t *testing.T) {
	const base, mib = 64 << 20, 1 << 20
	for _, c := range []struct{ held, buffers, live, want int64 }{
		{0, 0, 10 * mib, base},                                             // a flood's bytes are garbage: base bounds it
		{200 * mib, 200 * mib, 10 * mib, 216 * mib},                        // retained executions
		{20 * mib, 0, 300 * mib, 616 * mib},                                // many busy tenants at once: GOGC's own goal
		{500 * mib, 0, 300 * mib, 616 * mib},                               // both: the larger
		{0, 0, 24 * mib, base},                                             // 2 × 24 + 16 = base
		{0, 0, 25 * mib, 2*25*mib + heldHeadroom},                          // just past it
		{34 * mib, 32 * mib, 48 * mib, 32*mib + 4*mib + 2*16*mib + 16*mib}, // four floods: their budgets are not doubled
		{20 * mib, 16 * mib, 300 * mib, 16*mib + 2*mib + 2*284*mib + 16*mib},
		{600 * mib, 500 * mib, 300 * mib, 616 * mib}, // buffers counted past the live heap (freed since): held
	} {
		if got := softLimit(base, c.held, c.buffers, c.live); got != c.want {
			t.Errorf("softLimit(64 MiB, held %d MiB, buffers %d MiB, live %d MiB) = %d MiB, want %d MiB", c.held/mib, c.buffers/mib, c.live/mib, got/mib, c.want/mib)
		}
	}
}

// TestDocumentedFlagsExist: every `--flag` the README and docs/ name is
// one aiod takes (a renamed or refused flag in the docs, such as --token
// named as a setting, fails here), but for the flags of other programs a
// page names on purpose.
func TestDocumentedFlagsExist(t *testing.T) {
	known := map[string]bool{"--version": true, "--help": true}
	for _, s := range (&options{}).settings() {
		known["--"+s.flag] = true
	}
	others := map[string]map[string]bool{
		"configuration.md": {"--token": true, "--jupyter-token": true},                                                                     // named as refused on the command line
		"performance.md":   {"--start": true, "--no-start": true, "--start-only": true, "--restore-sizes": true, "--restore-rounds": true}, // aiobench's
		"shell.md":         {"--norc": true, "--noprofile": true},                                                                          // bash's
	}
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	flagRe := regexp.MustCompile("`(--[a-z][a-z0-9-]*)")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flagRe.FindAllStringSubmatch(string(b), -1) {
			if !known[m[1]] && !others[filepath.Base(f)][m[1]] {
				t.Errorf("%s names %s, which aiod does not take", filepath.Base(f), m[1])
			}
		}
	}
}
