package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/aiod/aiod/bench/compare"
	"github.com/aiod/aiod/bench/torture"
)

// tortureResult is the torture's report with what only a run that owns
// the daemon sees: its log's panics and how long SIGTERM took.
type tortureResult struct {
	Date     string          `json:"date"`
	Settings []string        `json:"daemon_settings"`
	Report   *torture.Report `json:"report"`
	Panics   []string        `json:"panics"`
	StopSecs float64         `json:"sigterm_seconds"`
}

// settingsFlag collects -set NAME=VALUE.
type settingsFlag []string

func (s *settingsFlag) String() string { return strings.Join(*s, " ") }

func (s *settingsFlag) Set(v string) error {
	if name, _, ok := strings.Cut(v, "="); !ok || !strings.HasPrefix(name, "AIO_") {
		return fmt.Errorf("want AIO_NAME=VALUE, got %q", v)
	}
	*s = append(*s, v)
	return nil
}

// runTorture starts aiod under tenant isolation with JWT tenants, tortures
// it (package torture), stops it and reports.
func runTorture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg torture.Config
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long the torture runs")
	fs.DurationVar(&cfg.Quiet, "quiet", 30*time.Second, "how long the measured tenant runs alone first")
	fs.IntVar(&cfg.Callers, "callers", 16, "callers (tenants) at once: one measured (calls back to back), one paced, -hostile hostile, the rest mixed")
	fs.DurationVar(&cfg.Pace, "pace", 250*time.Millisecond, "the paced tenant's interval between calls")
	fs.IntVar(&cfg.Hostile, "hostile", 2, "hostile callers among them")
	jsonOut := fs.String("json", "", "write the result as JSON to this file")
	profile := fs.String("cpu-profile", "", "write a 30 s CPU profile of aiod, taken 10 s into the torture, to this file")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	var extra settingsFlag
	fs.Var(&extra, "set", "an AIO_* setting of the daemon, NAME=VALUE, after the torture's own (repeat it; e.g. -set AIO_RUNTIMES_CPU_WEIGHT=1)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*quiet {
		cfg.Log = stderr
	}
	dir, err := os.MkdirTemp("", "aiobench-torture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := compare.BuildDaemon(ctx, dir)
	if err != nil {
		return err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	der, _ := x509.MarshalPKIXPublicKey(pub)
	admin := "torture-admin-" + fmt.Sprint(time.Now().UnixNano())
	pport, err := compare.FreePort()
	if err != nil {
		return err
	}
	settings := []string{"AIO_ISOLATION=tenant", "AIO_KERNEL_PREWARM=0", "AIO_RUNTIME_MEMORY_LIMIT=1G",
		"AIO_ACCESS_LOG=false", "AIO_MAX_SESSIONS_PER_KEY=12", "AIO_EXECUTION_RETENTION=30",
		fmt.Sprintf("AIO_PPROF_ADDR=127.0.0.1:%d", pport)}
	settings = append(settings, extra...)
	env := append([]string{"AIO_JWT_PUBLIC_KEY=" + string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), "AIO_TOKEN=" + admin}, settings...)
	d, err := compare.StartDaemon(ctx, "torture", bin, dir, env...)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			d.Stop()
		}
	}()
	cfg.URL, cfg.DaemonPID, cfg.Admin = d.URL(), d.PID(), admin
	cfg.FirstUID, cfg.LastUID = d.TenantUIDs()
	cfg.Token = func(sub string) string {
		s, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(24 * time.Hour).Unix()}).SignedString(priv)
		return s
	}
	cfg.ForceGC = func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", pport), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("force a GC: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	if *profile != "" {
		go func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(2*cfg.Quiet + 15*time.Second): // the two quiet phases, then 15 s in
			}
			if err := fetchTo(ctx, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=30", pport), *profile); err != nil {
				fmt.Fprintln(stderr, "cpu profile:", err)
			}
		}()
	}
	rep, err := torture.Run(ctx, cfg)
	if err != nil {
		return err
	}
	res := &tortureResult{Date: time.Now().UTC().Format(time.RFC3339), Settings: settings, Report: rep}
	res.StopSecs = d.StopTimed().Seconds()
	stopped = true
	res.Panics = panicsIn(d.LogPath())
	writeTorture(stdout, res)
	if err := writeJSON(stdout, *jsonOut, res); err != nil {
		return err
	}
	var problems []string
	if len(res.Panics) > 0 {
		problems = append(problems, fmt.Sprintf("%d panics logged", len(res.Panics)))
	}
	if n := sum(rep.Failures); n > 0 {
		problems = append(problems, fmt.Sprintf("%d failures", n))
	}
	if !rep.Settled {
		problems = append(problems, "levels did not come back")
	}
	if res.StopSecs >= 5 {
		problems = append(problems, fmt.Sprintf("SIGTERM took %.1f s", res.StopSecs))
	}
	if len(problems) > 0 {
		return errors.New("torture: " + strings.Join(problems, "; "))
	}
	return nil
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// panicsIn lists the log lines that report a panic (the router's
// recover logs "panic"; a crash prints "panic:" and goroutine dumps).
func panicsIn(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{"cannot read the log: " + err.Error()}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(strings.ToLower(l), "panic") {
			out = append(out, l)
		}
	}
	return out
}

func writeTorture(w io.Writer, res *tortureResult) {
	r := res.Report
	fmt.Fprintf(w, "torture %s, %d callers (%d hostile)\n", r.Duration, r.Callers, r.Hostile)
	fmt.Fprintf(w, "measured tenant alone:   %5d calls, p50 %7.1f ms, p99 %7.1f ms, max %7.1f ms, %d errors\n", r.Quiet.Calls, r.Quiet.P50, r.Quiet.P99, r.Quiet.Max, r.Quiet.Errors)
	fmt.Fprintf(w, "measured under torture:  %5d calls, p50 %7.1f ms, p99 %7.1f ms, max %7.1f ms, %d errors\n", r.Under.Calls, r.Under.P50, r.Under.P99, r.Under.Max, r.Under.Errors)
	fmt.Fprintf(w, "paced (%s) alone:     %5d calls, p50 %7.1f ms, p99 %7.1f ms, max %7.1f ms, %d errors\n", r.Pace, r.PacedQuiet.Calls, r.PacedQuiet.P50, r.PacedQuiet.P99, r.PacedQuiet.Max, r.PacedQuiet.Errors)
	fmt.Fprintf(w, "paced under torture:     %5d calls, p50 %7.1f ms, p99 %7.1f ms, max %7.1f ms, %d errors\n", r.PacedUnder.Calls, r.PacedUnder.P50, r.PacedUnder.P99, r.PacedUnder.Max, r.PacedUnder.Errors)
	fmt.Fprintf(w, "%-26s %7s %7s %7s\n", "action", "ok", "refused", "failed")
	seen := map[string]bool{}
	for _, m := range []map[string]int{r.OK, r.Refused, r.Failures} {
		for k := range m {
			seen[k] = true
		}
	}
	var names []string
	for k := range seen {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(w, "%-26s %7d %7d %7d\n", k, r.OK[k], r.Refused[k], r.Failures[k])
	}
	for _, e := range r.Examples {
		fmt.Fprintln(w, "failure:", e)
	}
	fmt.Fprintf(w, "levels    goroutines  fds  rss MiB  processes\n")
	for _, l := range []struct {
		n string
		v torture.Levels
	}{{"before", r.Before}, {"peak", r.Peak}, {"after", r.After}} {
		fmt.Fprintf(w, "%-9s %10d %4d %8.1f %10d\n", l.n, l.v.Goroutines, l.v.FDs, l.v.RSSMiB, l.v.Processes)
	}
	fmt.Fprintf(w, "aiod's own CPU during the torture: %.2f cores\n", r.DaemonCores)
	fmt.Fprintf(w, "came back: %v; surfaces after: %v; SIGTERM: %.2f s; panics logged: %d\n", r.Settled, r.Surfaces, res.StopSecs, len(res.Panics))
}

// fetchTo writes what GET url answers to path.
func fetchTo(ctx context.Context, url, path string) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
