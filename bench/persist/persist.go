// Package persist measures sessions and executions that outlive their
// process (issue 28) on the real binary: snapshot and restore of a session
// holding a 100,000-row DataFrame, SIGTERM with live sessions to save,
// thousands of saved sessions, and aiod's RSS under a steady load with the
// execution store on disk.
package persist

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiod/aiod/bench/compare"
	"github.com/aiod/aiod/bench/restore"
	"github.com/aiod/aiod/stream/snapshot"
)

// Config says how much to measure.
type Config struct {
	Dir             string        // work folder (daemons, state directories); a temporary one when ""
	Saved           int           // saved sessions made for the scale figure; 5000
	Live            int           // live sessions saved by one SIGTERM; 20
	LoadDuration    time.Duration // the steady load; 2 min (0 skips it)
	LoadConcurrency int           // its workers; 4
	SizeRows        []int         // rows of the DataFrames of the by-size figures; 0 is a session without one
	SizeRounds      int           // restarts the by-size restores are measured over; 3
	Progress        io.Writer     // a line per phase; nil for none
}

// Report is what a run measured; times in milliseconds unless named.
type Report struct {
	SnapshotMs      []float64 `json:"snapshot_ms"` // POST .../snapshot of the DataFrame session
	SnapshotBytes   int64     `json:"snapshot_bytes"`
	RestoreCallMs   []float64 `json:"restore_call_ms"` // first call on the saved DataFrame session after a restart: start, restore, code
	FreshCallMs     []float64 `json:"fresh_call_ms"`   // first call on a new session: start, code
	ForkMs          []float64 `json:"fork_ms"`         // POST .../fork of the DataFrame session (snapshot, start, restore)
	SigtermLive     int       `json:"sigterm_live_sessions"`
	SigtermSeconds  float64   `json:"sigterm_seconds"` // SIGTERM to exit, every live session saved
	SigtermSaved    int       `json:"sigterm_saved"`   // saved sessions listed after the restart
	Saved           int       `json:"saved_sessions"`
	SavedStartMs    float64   `json:"saved_start_ms"` // start to healthy with them
	SavedRSSMiB     float64   `json:"saved_rss_mib"`  // aiod's VmRSS with them, after listing them
	SavedListMs     float64   `json:"saved_list_ms"`  // GET /v2/code/sessions
	SavedListed     int       `json:"saved_listed"`   // saved sessions it listed
	SavedCallMs     []float64 `json:"saved_call_ms"`  // first calls on random saved sessions (restored)
	SavedDiskMiB    float64   `json:"saved_disk_mib"` // their files
	LoadSeconds     float64   `json:"load_seconds"`   // the steady load
	LoadCalls       int       `json:"load_calls"`     //
	LoadErrors      int       `json:"load_errors"`    //
	LoadRSSMaxMiB   float64   `json:"load_rss_max_mib"`
	LoadRSSEndMiB   float64   `json:"load_rss_end_mib"`
	LoadFetched     int       `json:"load_fetched"` // executions fetched by id at the end (every 20th, and the first 100)
	LoadFetchedOK   int       `json:"load_fetched_ok"`
	LoadStoredMiB   float64   `json:"load_stored_mib"` // what the store held on disk at the end
	LoadCachedMiB   float64   `json:"load_cached_mib"` // and in memory
	LoadRetentionS  float64   `json:"load_retention_seconds"`
	LoadStoredCount int       `json:"load_stored"`
	BySize          []Size    `json:"by_size"`
}

// Size is the snapshot and restore of a session of one size, as
// aiobench compare measures it too.
type Size = restore.Size

const dfSetup = `import numpy as np
import pandas as pd
df = pd.DataFrame({"a": np.arange(100000), "b": np.arange(100000) * 0.5, "c": ["r%d" % i for i in range(100000)]})
def double(x):
    return 2 * x
class Counter:
    def __init__(self):
        self.n = 0
counter = Counter()
square = lambda x: x * x
gen = (i for i in range(10))
print(len(df))
`

type client struct {
	url string
	hc  *http.Client
}

func (c *client) do(ctx context.Context, method, path string, body any) (map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var env map[string]any
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("%s %s: %d %.200s", method, path, resp.StatusCode, raw)
	}
	if resp.StatusCode != 200 {
		return env, fmt.Errorf("%s %s: %d %v", method, path, resp.StatusCode, env["message"])
	}
	return env, nil
}

func data(env map[string]any) map[string]any {
	d, _ := env["data"].(map[string]any)
	return d
}

// exec runs code in session sid and returns the answer's data, timed.
func (c *client) exec(ctx context.Context, sid, code string) (map[string]any, float64, error) {
	began := time.Now()
	env, err := c.do(ctx, http.MethodPost, "/v2/code/execute", map[string]any{"language": "python", "session_id": sid, "code": code, "timeout": 120})
	ms := float64(time.Since(began).Microseconds()) / 1000
	if err != nil {
		return nil, ms, err
	}
	d := data(env)
	if d["status"] != "ok" {
		return d, ms, fmt.Errorf("session %s: %v", sid, env["message"])
	}
	return d, ms, nil
}

// Run measures; it starts and stops every daemon itself.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Saved <= 0 {
		cfg.Saved = 5000
	}
	if cfg.Live <= 0 {
		cfg.Live = 20
	}
	if cfg.LoadConcurrency <= 0 {
		cfg.LoadConcurrency = 4
	}
	if cfg.SizeRounds <= 0 {
		cfg.SizeRounds = 3
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "aiobench-persist-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		cfg.Dir = d
	}
	say := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	bin, err := compare.BuildDaemon(ctx, cfg.Dir)
	if err != nil {
		return nil, err
	}
	state := filepath.Join(cfg.Dir, "state")
	first := 1_500_000_000 + rand.IntN(400_000)*1000
	start := func() (*compare.Daemon, *client, error) {
		return startKernelDaemon(ctx, "persist", bin, cfg.Dir, state, first)
	}
	r := &Report{}

	// The DataFrame session: snapshots, a fork, fresh starts, restores.
	d, c, err := start()
	if err != nil {
		return nil, err
	}
	stop := func() float64 {
		began := time.Now()
		d.Stop()
		return time.Since(began).Seconds()
	}
	if _, _, err := c.exec(ctx, "df", dfSetup); err != nil {
		stop()
		return nil, err
	}
	for range 5 {
		began := time.Now()
		env, err := c.do(ctx, http.MethodPost, "/v2/code/sessions/df/snapshot", map[string]any{})
		if err != nil {
			stop()
			return nil, err
		}
		r.SnapshotMs = append(r.SnapshotMs, float64(time.Since(began).Microseconds())/1000)
		r.SnapshotBytes = int64(data(env)["bytes"].(float64))
	}
	for i := range 3 {
		if _, ms, err := c.exec(ctx, fmt.Sprintf("fresh-%d", i), "print(1)"); err == nil {
			r.FreshCallMs = append(r.FreshCallMs, ms)
		}
		began := time.Now()
		if _, err := c.do(ctx, http.MethodPost, "/v2/code/sessions/df/fork", map[string]any{"session_id": fmt.Sprintf("fork-%d", i)}); err == nil {
			r.ForkMs = append(r.ForkMs, float64(time.Since(began).Microseconds())/1000)
		}
		_, _ = c.do(ctx, http.MethodDelete, fmt.Sprintf("/v2/code/sessions/fork-%d", i), nil)
		_, _ = c.do(ctx, http.MethodDelete, fmt.Sprintf("/v2/code/sessions/fresh-%d", i), nil)
	}
	if _, _, err := c.exec(ctx, "tiny", "x = 1\ny = [1, 2, 3]\ndef f(a):\n    return a + x\n"); err != nil {
		stop()
		return nil, err
	}
	say("snapshot of the DataFrame session: %v ms, %d bytes; fork %v ms; fresh first call %v ms", r.SnapshotMs, r.SnapshotBytes, r.ForkMs, r.FreshCallMs)
	for range 3 {
		stop()
		if d, c, err = start(); err != nil {
			return nil, err
		}
		// The kernel template of a new daemon warms up first (imports):
		// a throwaway session waits for it, so the call below measures
		// the start from a warm template and the restore.
		if _, _, err := c.exec(ctx, "warm", "print(1)"); err != nil {
			stop()
			return nil, err
		}
		_, _ = c.do(ctx, http.MethodDelete, "/v2/code/sessions/warm", nil)
		out, ms, err := c.exec(ctx, "df", "print(len(df), double(2))")
		if err != nil || out["restored"] != true {
			stop()
			return nil, fmt.Errorf("the DataFrame session after a restart: %v %v", out, err)
		}
		r.RestoreCallMs = append(r.RestoreCallMs, ms)
	}
	say("first call on the saved DataFrame session after a restart: %v ms", r.RestoreCallMs)

	// SIGTERM with live sessions to save.
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range cfg.Live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := "import pandas as pd\nt = pd.DataFrame({'a': range(10000)})\nname = 'live-%d'\nprint(len(t))"
			if _, _, err := c.exec(ctx, fmt.Sprintf("live-%d", i), fmt.Sprintf(code, i)); err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	if e, _ := failed.Load().(error); e != nil {
		stop()
		return nil, e
	}
	r.SigtermLive = cfg.Live + 2 // with df and tiny
	r.SigtermSeconds = stop()
	if d, c, err = start(); err != nil {
		return nil, err
	}
	env, err := c.do(ctx, http.MethodGet, "/v2/code/sessions", nil)
	if err != nil {
		stop()
		return nil, err
	}
	for _, s := range data(env)["sessions"].([]any) {
		if s.(map[string]any)["state"] == "saved" {
			r.SigtermSaved++
		}
	}
	stop()
	say("SIGTERM with %d live sessions: %.2f s; %d saved sessions listed after the restart", r.SigtermLive, r.SigtermSeconds, r.SigtermSaved)

	// Thousands of saved sessions: copies of tiny's snapshot, sealed by
	// the daemon's key (the daemon is stopped; nothing else writes there).
	m, err := snapshot.Open(snapshot.Config{Dir: filepath.Join(state, "snapshots")})
	if err != nil {
		return nil, err
	}
	tiny, _ := m.Latest(snapshot.Key{Tenant: "default", Language: "python", ID: "tiny"})
	if tiny == nil {
		m.Close()
		return nil, fmt.Errorf("no snapshot of the tiny session")
	}
	for i := range cfg.Saved {
		if _, err := m.Fork(tiny, snapshot.Key{Tenant: "default", Language: "python", ID: fmt.Sprintf("saved-%05d", i)}); err != nil {
			m.Close()
			return nil, err
		}
	}
	m.Close()
	r.Saved = cfg.Saved
	r.SavedDiskMiB = float64(dirSize(filepath.Join(state, "snapshots"))) / (1 << 20)
	began := time.Now()
	if d, c, err = start(); err != nil {
		return nil, err
	}
	r.SavedStartMs = float64(time.Since(began).Microseconds()) / 1000
	began = time.Now()
	env, err = c.do(ctx, http.MethodGet, "/v2/code/sessions", nil)
	if err != nil {
		stop()
		return nil, err
	}
	r.SavedListMs = float64(time.Since(began).Microseconds()) / 1000
	for _, s := range data(env)["sessions"].([]any) {
		if s.(map[string]any)["state"] == "saved" {
			r.SavedListed++
		}
	}
	env = nil
	r.SavedRSSMiB = rssMiB(d.PID())
	if _, _, err := c.exec(ctx, "warm", "print(1)"); err != nil { // the template warms up
		stop()
		return nil, err
	}
	_, _ = c.do(ctx, http.MethodDelete, "/v2/code/sessions/warm", nil)
	for _, n := range rand.Perm(cfg.Saved)[:min(10, cfg.Saved)] {
		sid := fmt.Sprintf("saved-%05d", n)
		out, ms, err := c.exec(ctx, sid, "print(f(1), y)")
		if err != nil || out["restored"] != true || out["stdout"] != "2 [1, 2, 3]\n" {
			stop()
			return nil, fmt.Errorf("saved session %s: %v %v", sid, out, err)
		}
		r.SavedCallMs = append(r.SavedCallMs, ms)
		_, _ = c.do(ctx, http.MethodDelete, "/v2/code/sessions/"+sid, nil)
	}
	stop()
	say("%d saved sessions (%.1f MiB on disk): start %.0f ms, list %.0f ms (%d saved), RSS %.1f MiB; first calls %v ms",
		r.Saved, r.SavedDiskMiB, r.SavedStartMs, r.SavedListMs, r.SavedListed, r.SavedRSSMiB, r.SavedCallMs)

	if len(cfg.SizeRows) > 0 {
		if err := bySize(ctx, cfg, bin, r, say); err != nil {
			return r, err
		}
	}
	if cfg.LoadDuration > 0 {
		if err := steadyLoad(ctx, cfg, bin, r, say); err != nil {
			return r, err
		}
	}
	return r, nil
}

// startKernelDaemon starts bin with the kernel backend, its state in
// state and tenant uids from first, and a client of it.
func startKernelDaemon(ctx context.Context, name, bin, dir, state string, first int) (*compare.Daemon, *client, error) {
	d, err := compare.StartDaemon(ctx, name, bin, dir, "AIO_STATE_DIR="+state,
		fmt.Sprintf("AIO_TENANT_UIDS=%d-%d", first, first+999), "AIO_CODE_BACKEND=kernel")
	if err != nil {
		return nil, nil, err
	}
	return d, &client{url: d.URL(), hc: &http.Client{Timeout: 5 * time.Minute}}, nil
}

// bySize times snapshots and restores by size (restore.BySize) over
// cfg.SizeRounds restarts of a daemon with its defaults (tenant isolation
// when run as root), one state folder and uid range for every start.
func bySize(ctx context.Context, cfg Config, bin string, r *Report, say func(string, ...any)) error {
	state, first := filepath.Join(cfg.Dir, "state-sizes"), 1_700_000_000+rand.IntN(200_000)*1000
	start := func() (restore.Daemon, error) {
		d, _, err := startKernelDaemon(ctx, "sizes", bin, cfg.Dir, state, first)
		if err != nil {
			return nil, err // not a nil *compare.Daemon in an interface
		}
		return d, nil
	}
	sizes, err := restore.BySize(ctx, start, cfg.SizeRows, cfg.SizeRounds, say)
	if err != nil {
		return err
	}
	r.BySize = sizes
	return nil
}

// steadyLoad runs cfg.LoadConcurrency workers, each in its own session,
// for cfg.LoadDuration at the default retention, samples aiod's RSS every
// second, and fetches executions by id at the end.
func steadyLoad(ctx context.Context, cfg Config, bin string, r *Report, say func(string, ...any)) error {
	first := 1_600_000_000 + rand.IntN(300_000)*1000
	d, err := compare.StartDaemon(ctx, "load", bin, cfg.Dir, "AIO_STATE_DIR="+filepath.Join(cfg.Dir, "state-load"),
		fmt.Sprintf("AIO_TENANT_UIDS=%d-%d", first, first+999), "AIO_CODE_BACKEND=kernel")
	if err != nil {
		return err
	}
	defer d.Stop()
	c := &client{url: d.URL(), hc: &http.Client{Timeout: 2 * time.Minute}}
	lctx, cancel := context.WithTimeout(ctx, cfg.LoadDuration)
	defer cancel()
	var mu sync.Mutex
	var ids []string
	var calls, errs atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for w := range cfg.LoadConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; lctx.Err() == nil; n++ {
				id := fmt.Sprintf("load-%d-%d", w, n)
				body := map[string]any{"language": "python", "session_id": fmt.Sprintf("load-%d", w), "execution_id": id,
					"code": fmt.Sprintf("print(%q * 32)", id), "timeout": 60}
				env, err := c.do(lctx, http.MethodPost, "/v2/code/execute", body)
				if lctx.Err() != nil {
					return
				}
				calls.Add(1)
				if err != nil || data(env)["status"] != "ok" {
					errs.Add(1)
					continue
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		}()
	}
	t := time.NewTicker(time.Second)
	for lctx.Err() == nil {
		select {
		case <-lctx.Done():
		case <-t.C:
			r.LoadRSSMaxMiB = max(r.LoadRSSMaxMiB, rssMiB(d.PID()))
		}
	}
	t.Stop()
	wg.Wait()
	r.LoadSeconds = time.Since(began).Seconds()
	r.LoadCalls, r.LoadErrors = int(calls.Load()), int(errs.Load())
	r.LoadRSSEndMiB = rssMiB(d.PID())
	for i, id := range ids { // in the order they finished
		if i%20 != 0 && i >= 100 {
			continue
		}
		r.LoadFetched++
		env, err := c.do(ctx, http.MethodGet, "/v2/code/executions/"+id, nil)
		if err == nil && data(env)["state"] == "done" && strings.HasPrefix(data(env)["stdout"].(string), id) {
			r.LoadFetchedOK++
		}
	}
	env, err := c.do(ctx, http.MethodGet, "/v2/code/info", nil)
	if err == nil {
		x, _ := data(env)["executions"].(map[string]any)
		num := func(k string) float64 { f, _ := x[k].(float64); return f }
		r.LoadStoredMiB, r.LoadCachedMiB = num("stored_bytes")/(1<<20), num("finished_bytes")/(1<<20)
		r.LoadRetentionS, r.LoadStoredCount = num("retention_seconds"), int(num("stored"))
	}
	say("steady load %.0f s, %d workers: %d calls, %d errors; RSS max %.1f MiB, end %.1f MiB; %d of %d executions fetched by id; store %.1f MiB on disk (%d), %.1f MiB cached",
		r.LoadSeconds, cfg.LoadConcurrency, r.LoadCalls, r.LoadErrors, r.LoadRSSMaxMiB, r.LoadRSSEndMiB, r.LoadFetchedOK, r.LoadFetched,
		r.LoadStoredMiB, r.LoadStoredCount, r.LoadCachedMiB)
	return nil
}

func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb float64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb / 1024
		}
	}
	return 0
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
