package compare

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goccy/go-json"
)

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// moduleRoot finds the directory of go.mod from the working directory up.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the aiod module (run from its checkout)")
	}
	return filepath.Dir(mod), nil
}

// buildDaemon builds ./cmd/aiod into dir.
func buildDaemon(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "aiod")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/aiod")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/aiod: %v\n%s", err, out)
	}
	return bin, nil
}

// daemon is one aiod process this run started.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	url    string
	logf   *os.File
	client *http.Client
	exited chan struct{}
	token  string // sent by getJSON when the daemon wants credentials
}

// startDaemon runs bin on a free loopback port with env added to ours and
// waits for /healthz.
func startDaemon(ctx context.Context, name, bin, dir, run string, env ...string) (*daemon, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "aiod-"+name+".log"))
	if err != nil {
		return nil, err
	}
	work := filepath.Join(dir, "work-"+name)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	d := &daemon{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", port), logf: logf,
		client: &http.Client{Timeout: 5 * time.Minute}, exited: make(chan struct{})}
	d.cmd = exec.Command(bin, "--addr", fmt.Sprintf("127.0.0.1:%d", port))
	d.cmd.Dir = work
	d.cmd.Env = append(cleanEnv(), append([]string{markerEnv + "=" + run, "AIO_WORKDIR=" + work,
		"AIO_STATE_DIR=" + filepath.Join(dir, "state-"+name), "AIO_TENANT_UIDS=" + tenantUIDs()}, env...)...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("aiod %s: %w", name, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := d.client.Get(d.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return d, nil
			}
		}
		select {
		case <-d.exited:
			return nil, fmt.Errorf("aiod %s exited at start: %s", name, tail(logf.Name()))
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("aiod %s not healthy after 60 s: %s", name, tail(logf.Name()))
		}
	}
}

// cleanEnv is our environment without AIO_* settings and Go GC knobs, so
// the daemons run with their defaults plus what the run sets.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIO_") && !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			out = append(out, kv)
		}
	}
	return out
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop sends SIGTERM (aiod then stops its kernels and REPLs) and waits;
// SIGKILL to its process group if it does not end in time.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(45 * time.Second):
		_ = syscall.Kill(-d.pid(), syscall.SIGKILL)
		<-d.exited
	}
	d.logf.Close()
}

// poolReady is data.pools.NAME.ready of /v2/code/info.
func (d *daemon) poolReady(ctx context.Context, name string) (int, error) {
	ready, _, err := d.pool(ctx, name)
	return ready, err
}

// pool returns the named pool's ready runtimes and size, from /v2/code/info.
func (d *daemon) pool(ctx context.Context, name string) (ready, size int, err error) {
	var env struct {
		Data struct {
			Pools map[string]struct{ Ready, Size int } `json:"pools"`
		} `json:"data"`
	}
	if err := d.getJSON(ctx, "/v2/code/info", &env); err != nil {
		return 0, 0, err
	}
	p, ok := env.Data.Pools[name]
	if !ok {
		return 0, 0, fmt.Errorf("/v2/code/info has no pool %q", name)
	}
	return p.Ready, p.Size, nil
}

// gcCycles reads how many garbage collections the daemon has run, from
// its /metrics (go_gc_duration_seconds_count).
func (d *daemon) gcCycles(ctx context.Context) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/metrics", nil)
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if _, v, ok := strings.Cut(string(b), "\ngo_gc_duration_seconds_count "); ok {
		v, _, _ = strings.Cut(v, "\n")
		return strconv.ParseFloat(v, 64)
	}
	return 0, fmt.Errorf("/metrics has no go_gc_duration_seconds_count (HTTP %d)", resp.StatusCode)
}

// waitPool waits until the named pool holds n ready runtimes.
func (d *daemon) waitPool(ctx context.Context, name string, n int) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		r, err := d.poolReady(ctx, name)
		if err != nil {
			return err
		}
		if r >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pool %s: %d ready after 3 min, want %d", name, r, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// execAnswer is the part of a /v2/code/execute answer the run reads.
type execAnswer struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
	Data    *struct {
		Status    string `json:"status"`
		Stdout    string `json:"stdout"`
		Truncated bool   `json:"truncated"`
	} `json:"data"`
}

// execute posts one call and returns the decoded answer.
func (d *daemon) execute(ctx context.Context, body map[string]any) (*execAnswer, error) {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", d.url+"/v2/code/execute", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var a execAnswer
	if err := json.Unmarshal(out, &a); err != nil || resp.StatusCode != 200 || !a.Success || a.Data == nil || a.Data.Status != "ok" {
		return nil, fmt.Errorf("aiod %s: HTTP %d: %.300q", d.name, resp.StatusCode, out)
	}
	return &a, nil
}

// Daemon is an aiod process started by StartDaemon, for the Go benchmarks
// of package bench, which measure the real binary rather than the gateway
// in-process.
type Daemon struct{ d *daemon }

// BuildDaemon builds ./cmd/aiod into dir and returns the binary's path.
func BuildDaemon(ctx context.Context, dir string) (string, error) { return buildDaemon(ctx, dir) }

// StartDaemon runs bin on a free loopback port, its files under dir, with
// the AIO_* settings in env added to a clean environment, and waits until
// it is healthy. Stop it with Stop.
func StartDaemon(ctx context.Context, name, bin, dir string, env ...string) (*Daemon, error) {
	return StartDaemonRun(ctx, name, bin, dir, "gobench", env...)
}

// StartDaemonRun is StartDaemon with the run's marker, which the
// daemon's processes carry and Leftovers looks for.
func StartDaemonRun(ctx context.Context, name, bin, dir, run string, env ...string) (*Daemon, error) {
	d, err := startDaemon(ctx, name, bin, dir, run, env...)
	if err != nil {
		return nil, err
	}
	return &Daemon{d}, nil
}

// Leftovers waits up to timeout for every process carrying run's marker to
// be gone, and says which are not.
func Leftovers(run string, timeout time.Duration) error { return leftovers(run, timeout) }

// ThisMachine describes this computer.
func ThisMachine() Machine { return machine() }

// URL is the daemon's base URL, http://127.0.0.1:PORT.
func (d *Daemon) URL() string { return d.d.url }

// Stop sends SIGTERM and waits (SIGKILL to its process group past 45 s).
func (d *Daemon) Stop() { d.d.stop() }

// PID is the daemon's process id.
func (d *Daemon) PID() int { return d.d.pid() }

// tenantUIDs is a range of tenant uids for one daemon: the run's daemons
// (and any other aiod on the machine) may not share one.
func tenantUIDs() string {
	// Above the tests' slots (kerneltest.UIDRange: from 1,000,000,000,
	// 900 ranges) and below the daemon's default (2,000,000,000).
	first := 1_100_000_000 + rand.IntN(800_000)*1000
	return fmt.Sprintf("%d-%d", first, first+999)
}

// FreePort is a loopback port free now.
func FreePort() (int, error) { return freePort() }

// LogPath is the file the daemon logs to.
func (d *Daemon) LogPath() string { return d.d.logf.Name() }

// StopTimed sends SIGTERM and returns how long the daemon took to exit
// (SIGKILL to its process group past 45 s, and then the time is that).
func (d *Daemon) StopTimed() time.Duration {
	t0 := time.Now()
	d.d.stop()
	return time.Since(t0)
}

// WaitFullPool waits until the daemon's kernel pool, of the size its
// settings chose, is full (at once when they chose none).
func (d *Daemon) WaitFullPool(ctx context.Context) error {
	if _, size, err := d.d.pool(ctx, "kernel"); err != nil || size == 0 {
		return err
	}
	return waitFullPool(ctx, d.d)
}

// TenantUIDs is the --tenant-uids range the daemon runs with.
func (d *Daemon) TenantUIDs() (first, last uint32) {
	for _, e := range d.d.cmd.Env {
		if v, ok := strings.CutPrefix(e, "AIO_TENANT_UIDS="); ok {
			_, _ = fmt.Sscanf(v, "%d-%d", &first, &last)
		}
	}
	return first, last
}
