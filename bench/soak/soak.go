// Package soak runs aiobench soak: a mixed load on a daemon it starts,
// then everything left to expire, and whether aiod's live heap came back.
package soak

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/bench/compare"
	"github.com/aiod/aiod/bench/load"
)

// Config sizes aiobench soak.
type Config struct {
	Duration  time.Duration // of the mixed load; 3 minutes when zero
	Retention time.Duration // the daemon's --execution-retention; 30 s when zero
	KillEvery time.Duration // a session's kernel is killed this often; 20 s when zero
	// MaxGrowthMiB is how far the live heap may end above where it
	// started once everything expired; 8 MiB when zero (the 10,000
	// tombstones of evicted executions take about 3 of them).
	MaxGrowthMiB float64
	Log          io.Writer `json:"-"` // progress lines; nil for none
}

// HeapSample is the daemon's memory at one moment, after a forced GC.
type HeapSample struct {
	At         string  `json:"at"`
	HeapMiB    float64 `json:"heap_alloc_mib"`
	InuseMiB   float64 `json:"heap_inuse_mib"`
	RSSMiB     float64 `json:"rss_mib"`
	Goroutines int     `json:"goroutines"`
}

// Result is what aiobench soak measured.
type Result struct {
	Date       string          `json:"date"`
	Machine    compare.Machine `json:"machine"`
	Settings   Config          `json:"settings"`
	Loads      []*load.Report  `json:"loads"`
	Kills      int             `json:"kernels_killed"`
	Deleted    int             `json:"sessions_deleted"`
	Samples    []HeapSample    `json:"samples"`
	GrowthMiB  float64         `json:"heap_growth_mib"`
	IdleGCPerS float64         `json:"idle_gc_per_second"`
	Returned   bool            `json:"heap_returned"`
}

// Run starts aiod (built from the checkout) with a short execution
// retention and a loopback pprof listener, records its live heap, runs a
// mixed load (Python and JavaScript sessions over REST, Python over the
// WebSocket, one-shots of both, a kernel killed every KillEvery), deletes
// every session, waits past the retention, and records the heap again.
// The heap must come back to within MaxGrowthMiB of where it started.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Minute
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 30 * time.Second
	}
	if cfg.KillEvery <= 0 {
		cfg.KillEvery = 20 * time.Second
	}
	if cfg.MaxGrowthMiB <= 0 {
		cfg.MaxGrowthMiB = 8
	}
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", a...)
		}
	}
	dir, err := os.MkdirTemp("", "aiobench-soak-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin, err := compare.BuildDaemon(ctx, dir)
	if err != nil {
		return nil, err
	}
	pport, err := compare.FreePort()
	if err != nil {
		return nil, err
	}
	pprof := fmt.Sprintf("http://127.0.0.1:%d", pport)
	run := fmt.Sprintf("soak-%d", rand.IntN(1<<30))
	d, err := compare.StartDaemonRun(ctx, "soak", bin, dir, run, "AIO_CODE_BACKEND=kernel", "AIO_ACCESS_LOG=false",
		fmt.Sprintf("AIO_EXECUTION_RETENTION=%d", int(cfg.Retention.Seconds())), fmt.Sprintf("AIO_PPROF_ADDR=127.0.0.1:%d", pport))
	if err != nil {
		return nil, err
	}
	defer func() {
		d.Stop()
		_ = compare.Leftovers(run, 30*time.Second)
	}()
	res := &Result{Date: time.Now().UTC().Format(time.RFC3339), Machine: compare.ThisMachine(), Settings: cfg}
	sample := func(at string) error {
		s, err := heapSample(ctx, d, pprof, at)
		if err != nil {
			return err
		}
		res.Samples = append(res.Samples, s)
		logf("[soak] %-28s heap %6.1f MiB, in use %6.1f MiB, RSS %6.1f MiB, %d goroutines", at, s.HeapMiB, s.InuseMiB, s.RSSMiB, s.Goroutines)
		return nil
	}
	if err := sample("start"); err != nil {
		return nil, err
	}

	lctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	loads := []load.Config{
		{Mode: "rest", Language: "python", Concurrency: 4, Sessions: true},
		{Mode: "rest", Language: "javascript", Concurrency: 2, Sessions: true},
		{Mode: "ws", Language: "python", Concurrency: 2, Sessions: true},
		{Mode: "rest", Language: "python", Concurrency: 1},
		{Mode: "rest", Language: "javascript", Concurrency: 1},
	}
	var wg sync.WaitGroup
	reports := make([]*load.Report, len(loads))
	errs := make([]error, len(loads))
	for i, lc := range loads {
		lc.URL, lc.Duration, lc.Timeout, lc.Warmup = d.URL(), cfg.Duration, 60, 1
		lc.SessionPrefix = fmt.Sprintf("soak-%d", i)
		wg.Go(func() { reports[i], errs[i] = load.Run(lctx, lc) })
	}
	wg.Go(func() {
		t := time.NewTicker(cfg.KillEvery)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
			if pids, err := sessionPIDs(lctx, d); err == nil && len(pids) > 0 {
				if syscall.Kill(pids[rand.IntN(len(pids))], syscall.SIGKILL) == nil {
					res.Kills++
				}
			}
		}
	})
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("load %d (%s %s): %w", i, loads[i].Mode, loads[i].Language, err)
		}
		res.Loads = append(res.Loads, reports[i])
		logf("[soak] %s %s c%d sessions=%v: %d calls, %d errors %v", loads[i].Mode, loads[i].Language, loads[i].Concurrency, loads[i].Sessions,
			reports[i].Calls, reports[i].Errors, reports[i].ErrorKinds)
	}
	if err := sample("after the load"); err != nil {
		return nil, err
	}
	if res.Deleted, err = deleteSessions(ctx, d); err != nil {
		return nil, err
	}
	wait := cfg.Retention + 10*time.Second
	logf("[soak] deleted %d sessions; waiting %v for every execution to expire", res.Deleted, wait)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(wait):
	}
	if err := sample("everything expired"); err != nil {
		return nil, err
	}
	gc0, err := metric(ctx, d, "go_gc_duration_seconds_count")
	if err != nil {
		return nil, err
	}
	time.Sleep(10 * time.Second)
	gc1, err := metric(ctx, d, "go_gc_duration_seconds_count")
	if err != nil {
		return nil, err
	}
	res.IdleGCPerS = (gc1 - gc0) / 10
	if err := sample("10 s later"); err != nil {
		return nil, err
	}
	end := res.Samples[len(res.Samples)-1]
	res.GrowthMiB = end.HeapMiB - res.Samples[0].HeapMiB
	res.Returned = res.GrowthMiB <= cfg.MaxGrowthMiB
	return res, nil
}

// heapSample forces a GC through the pprof listener (heap?gc=1), then
// reads the daemon's metrics.
func heapSample(ctx context.Context, d *compare.Daemon, pprof, at string) (HeapSample, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", pprof+"/debug/pprof/heap?gc=1", nil)
	resp, err := client.Do(req)
	if err != nil {
		return HeapSample{}, fmt.Errorf("force a GC: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	m, err := metrics(ctx, d)
	if err != nil {
		return HeapSample{}, err
	}
	const mib = 1 << 20
	return HeapSample{At: at, HeapMiB: m["go_memstats_heap_alloc_bytes"] / mib, InuseMiB: m["go_memstats_heap_inuse_bytes"] / mib,
		RSSMiB: m["process_resident_memory_bytes"] / mib, Goroutines: int(m["go_goroutines"])}, nil
}

func metric(ctx context.Context, d *compare.Daemon, name string) (float64, error) {
	m, err := metrics(ctx, d)
	if err != nil {
		return 0, err
	}
	return m[name], nil
}

// metrics reads the unlabelled samples of /metrics.
func metrics(ctx context.Context, d *compare.Daemon) (map[string]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", d.URL()+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return compare.ParseMetrics(resp.Body)
}

type sessionList struct {
	Data struct {
		Sessions []struct {
			SessionID string `json:"session_id"`
			PID       int    `json:"pid"`
		} `json:"sessions"`
	} `json:"data"`
}

func listSessions(ctx context.Context, d *compare.Daemon) (*sessionList, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", d.URL()+"/v2/code/sessions", nil)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l sessionList
	return &l, json.NewDecoder(resp.Body).Decode(&l)
}

func sessionPIDs(ctx context.Context, d *compare.Daemon) ([]int, error) {
	l, err := listSessions(ctx, d)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, s := range l.Data.Sessions {
		if s.PID > 0 {
			pids = append(pids, s.PID)
		}
	}
	return pids, nil
}

func deleteSessions(ctx context.Context, d *compare.Daemon) (int, error) {
	l, err := listSessions(ctx, d)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range l.Data.Sessions {
		req, _ := http.NewRequestWithContext(ctx, "DELETE", d.URL()+"/v2/code/sessions/"+s.SessionID, nil)
		resp, err := client.Do(req)
		if err != nil {
			return n, err
		}
		resp.Body.Close()
		n++
	}
	return n, nil
}

// WriteTable prints the soak's samples and verdict.
func (r *Result) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "aiobench soak, %s: %s, %d cores; %v of mixed load, retention %v, a kernel killed every %v (%d killed)\n\n",
		r.Date, r.Machine.CPUModel, r.Machine.Cores, r.Settings.Duration, r.Settings.Retention, r.Settings.KillEvery, r.Kills)
	fmt.Fprintln(w, "| load | calls | errors |")
	fmt.Fprintln(w, "| --- | ---: | ---: |")
	for _, l := range r.Loads {
		kind := "sessions"
		if !l.Sessions {
			kind = "one-shot"
		}
		fmt.Fprintf(w, "| %s %s %s c%d | %d | %d |\n", l.Mode, l.Language, kind, l.Concurrency, l.Calls, l.Errors)
	}
	fmt.Fprintln(w, "\n| when | live heap | heap in use | RSS | goroutines |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: |")
	for _, s := range r.Samples {
		fmt.Fprintf(w, "| %s | %.1f MiB | %.1f MiB | %.1f MiB | %d |\n", s.At, s.HeapMiB, s.InuseMiB, s.RSSMiB, s.Goroutines)
	}
	verdict := "returned"
	if !r.Returned {
		verdict = "DID NOT return"
	}
	fmt.Fprintf(w, "\nlive heap %s: %+.1f MiB against the start (bound %.0f MiB); idle GC %.2f/s\n", verdict, r.GrowthMiB, r.Settings.MaxGrowthMiB, r.IdleGCPerS)
}

// client is the soak's HTTP client to its daemon.
var client = &http.Client{Timeout: time.Minute}
