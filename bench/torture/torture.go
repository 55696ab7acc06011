// Package torture drives a running aiod with many callers on every surface
// at once, two of them hostile, while one well-behaved tenant measures its
// calls; then it ends everything and checks that the daemon came back:
// every surface answers, and its goroutines, descriptors, memory and
// processes return to where they were. aiobench torture runs it for
// minutes against a daemon of its own; cmd/aiod's tests run a short form
// under -race.
package torture

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aiod/aiod/bench/compare"
	"github.com/coder/websocket"
	"github.com/goccy/go-json"
)

// Config says what to drive and for how long.
type Config struct {
	URL       string // the daemon's base URL
	DaemonPID int    // to read its descriptors and find its processes
	// Token signs in the caller of subject sub (a JWT); every caller is a
	// tenant of its own.
	Token func(sub string) string
	// Admin is the credential of the requests that read /metrics.
	Admin string
	// TenantUIDs is the daemon's --tenant-uids range: processes running as
	// them are the tenants'.
	FirstUID, LastUID uint32
	Duration          time.Duration // of the torture; 10 minutes when zero
	Quiet             time.Duration // the well-behaved tenant alone first; 20 s when zero
	Callers           int           // 16 when zero: one measured, one paced, Hostile hostile, the rest mixed
	// Pace is the paced tenant's interval between calls: a tenant within
	// its share of a machine shared by Callers tenants; 250 ms when zero.
	Pace    time.Duration
	Hostile int // 2 when zero (negative: none)
	// Settle bounds the wait for the levels to come back after the
	// torture; 150 s when zero. It should be longer than the daemon's
	// --execution-retention: finished executions keep their outputs.
	Settle time.Duration
	// ForceGC, when set, makes the daemon collect its garbage before its
	// levels are read (its pprof listener's heap?gc=1, or runtime.GC in
	// process): the live heap is then what the daemon holds.
	ForceGC func(context.Context) error `json:"-"`
	Log     io.Writer                   `json:"-"` // progress lines; nil for none
}

// Latency is a well-behaved tenant's calls in one phase.
type Latency struct {
	Calls  int     `json:"calls"`
	Errors int     `json:"errors"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
}

// Levels are the daemon's resources at one moment.
type Levels struct {
	Goroutines int     `json:"goroutines"`
	FDs        int     `json:"fds"`
	HeapMiB    float64 `json:"heap_inuse_mib"` // after a forced GC when Config.ForceGC is set
	RSSMiB     float64 `json:"rss_mib"`
	Processes  int     `json:"processes"` // the daemon's descendants and the tenants' processes, file helpers aside
	// Helpers are the tenants' file helpers (aiod-sandbox files), one per
	// tenant that used the file plane, each stopped after 2 minutes
	// unused.
	Helpers int `json:"file_helpers"`
	pids    []int
}

// Report is what a run saw.
type Report struct {
	Duration string         `json:"duration"`
	Callers  int            `json:"callers"`
	Hostile  int            `json:"hostile"`
	OK       map[string]int `json:"ok"`       // actions answered as expected, by action
	Refused  map[string]int `json:"refused"`  // 429 and 503 refusals naming a limit, by action
	Failures map[string]int `json:"failures"` // anything else (5xx, transport errors, wrong answers), by action
	Examples []string       `json:"examples"` // the first failures, one line each
	Quiet    Latency        `json:"quiet"`    // the measured tenant alone, its calls back to back
	Under    Latency        `json:"under"`    // the same during the torture
	// PacedQuiet and PacedUnder are the paced tenant's: one call every
	// Pace (at once after a slower one), alone and during the torture.
	Pace       string  `json:"pace"`
	PacedQuiet Latency `json:"paced_quiet"`
	PacedUnder Latency `json:"paced_under"`
	// DaemonCores is the CPU the daemon's own process used during the
	// torture, in cores (its runtimes not counted).
	DaemonCores float64        `json:"daemon_cores"`
	Before      Levels         `json:"before"`
	Peak        Levels         `json:"peak"`
	After       Levels         `json:"after"`
	Settled     bool           `json:"settled"`  // After came back within the slack of Before
	Leftover    []string       `json:"leftover"` // processes After has and Before had not: pid, uid, command line
	Surfaces    map[string]int `json:"surfaces"` // each surface's status after the torture
}

// Slack is how far After may stay above Before and still have come back:
// the daemon keeps some things on purpose (pooled buffers, Go's idle
// workers, tenants' sandboxes). RSS is reported, not checked: Go gives
// freed memory back to the system in its own time.
var Slack = Levels{Goroutines: 40, FDs: 16, HeapMiB: 64, Processes: 0}

type run struct {
	cfg    Config
	client *http.Client
	mu     sync.Mutex
	rep    *Report
}

func (r *run) logf(format string, a ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, "[torture] "+format+"\n", a...)
	}
}

// note records one action's outcome: ok, refused (a 429 or 503 that says
// which limit), or a failure with what was seen.
func (r *run) note(action string, outcome int, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch outcome {
	case ok:
		r.rep.OK[action]++
	case refused:
		r.rep.Refused[action]++
	default:
		r.rep.Failures[action]++
		if len(r.rep.Examples) < 20 {
			r.rep.Examples = append(r.rep.Examples, action+": "+oneLine(what))
		}
	}
}

const (
	ok = iota
	refused
	failed
)

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// Run tortures the daemon at cfg.URL and reports.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Minute
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = 20 * time.Second
	}
	if cfg.Callers <= 0 {
		cfg.Callers = 16
	}
	switch {
	case cfg.Hostile == 0:
		cfg.Hostile = 2
	case cfg.Hostile < 0:
		cfg.Hostile = 0
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 150 * time.Second
	}
	if cfg.Pace <= 0 {
		cfg.Pace = 250 * time.Millisecond
	}
	if cfg.Callers < cfg.Hostile+2 {
		return nil, fmt.Errorf("%d callers cannot hold one measured, one paced and %d hostile", cfg.Callers, cfg.Hostile)
	}
	r := &run{cfg: cfg, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		rep: &Report{Duration: cfg.Duration.String(), Callers: cfg.Callers, Hostile: cfg.Hostile,
			OK: map[string]int{}, Refused: map[string]int{}, Failures: map[string]int{}, Surfaces: map[string]int{}, Pace: cfg.Pace.String()}}
	defer r.client.CloseIdleConnections()

	measured, paced := newCaller(r, "measured"), newCaller(r, "paced")
	for _, c := range []*caller{measured, paced} {
		if _, err := c.exec(ctx, "python", "measured", "n = 0", 60); err != nil {
			return nil, fmt.Errorf("the %s tenant's first call: %w", c.sub, err)
		}
	}
	before, err := r.levels(ctx)
	if err != nil {
		return nil, err
	}
	r.rep.Before, r.rep.Peak = before, before
	r.logf("before: %+v", before)

	r.logf("the measured tenant alone for %v", cfg.Quiet)
	qctx, qcancel := context.WithTimeout(ctx, cfg.Quiet)
	r.rep.Quiet = measured.measure(qctx, 0)
	qcancel()
	r.logf("quiet: %+v", r.rep.Quiet)
	r.logf("the paced tenant alone for %v", cfg.Quiet)
	qctx, qcancel = context.WithTimeout(ctx, cfg.Quiet)
	r.rep.PacedQuiet = paced.measure(qctx, cfg.Pace)
	qcancel()
	r.logf("paced, quiet: %+v", r.rep.PacedQuiet)

	tctx, tcancel := context.WithTimeout(ctx, cfg.Duration)
	defer tcancel()
	cpu0, t0 := cpuSeconds(cfg.DaemonPID), time.Now()
	var wg sync.WaitGroup
	var under, pacedUnder Latency
	wg.Go(func() { under = measured.measure(tctx, 0) })
	wg.Go(func() { pacedUnder = paced.measure(tctx, cfg.Pace) })
	for i := 0; i < cfg.Hostile; i++ {
		c := newCaller(r, fmt.Sprintf("hostile-%d", i))
		wg.Go(func() { c.hostile(tctx) })
	}
	for i := 0; i < cfg.Callers-2-cfg.Hostile; i++ {
		c := newCaller(r, fmt.Sprintf("mixed-%d", i))
		wg.Go(func() { c.mixed(tctx) })
	}
	wg.Go(func() { r.sample(tctx) })
	wg.Wait()
	r.rep.DaemonCores = (cpuSeconds(cfg.DaemonPID) - cpu0) / time.Since(t0).Seconds()
	r.logf("daemon CPU during the torture: %.2f cores", r.rep.DaemonCores)
	r.rep.Under, r.rep.PacedUnder = under, pacedUnder
	r.logf("under torture: %+v; paced: %+v", under, pacedUnder)
	if ctx.Err() != nil {
		return r.rep, ctx.Err()
	}

	r.surfaces(ctx, measured)
	r.endAll(ctx)
	r.settle(ctx)
	return r.rep, nil
}

// sample keeps the highest levels seen, every 2 s.
func (r *run) sample(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l, err := r.levels(ctx)
		if err != nil {
			continue
		}
		r.mu.Lock()
		p := &r.rep.Peak
		p.Goroutines, p.FDs, p.RSSMiB, p.Processes = max(p.Goroutines, l.Goroutines), max(p.FDs, l.FDs), max(p.RSSMiB, l.RSSMiB), max(p.Processes, l.Processes)
		p.HeapMiB, p.Helpers = max(p.HeapMiB, l.HeapMiB), max(p.Helpers, l.Helpers)
		r.mu.Unlock()
	}
}

// settle waits for the levels to come back within Slack of Before.
func (r *run) settle(ctx context.Context) {
	deadline := time.Now().Add(r.cfg.Settle)
	b := r.rep.Before
	for {
		l, err := r.levels(ctx)
		if err == nil {
			r.rep.After = l
			// A file helper holds two descriptors of aiod's.
			if l.Goroutines <= b.Goroutines+Slack.Goroutines && l.FDs <= b.FDs+Slack.FDs+2*max(0, l.Helpers-b.Helpers) &&
				l.HeapMiB <= b.HeapMiB+Slack.HeapMiB && l.Processes <= b.Processes+Slack.Processes {
				r.rep.Settled = true
				r.logf("after: %+v (back)", l)
				return
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.rep.Leftover = describe(r.rep.After.pids, b.pids)
			r.logf("after: %+v (not back within %v); new processes: %v", r.rep.After, r.cfg.Settle, r.rep.Leftover)
			return
		}
		time.Sleep(time.Second)
	}
}

// levels reads the daemon's goroutines and RSS from /metrics, its open
// descriptors and the processes that are its or its tenants'.
func (r *run) levels(ctx context.Context) (Levels, error) {
	if r.cfg.ForceGC != nil {
		if err := r.cfg.ForceGC(ctx); err != nil {
			return Levels{}, err
		}
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", r.cfg.URL+"/metrics", nil)
	if r.cfg.Admin != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Admin)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return Levels{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return Levels{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	m, err := compare.ParseMetrics(resp.Body)
	if err != nil {
		return Levels{}, err
	}
	l := Levels{Goroutines: int(m["go_goroutines"]), RSSMiB: m["process_resident_memory_bytes"] / (1 << 20), HeapMiB: m["go_memstats_heap_inuse_bytes"] / (1 << 20)}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", r.cfg.DaemonPID)); err == nil {
		l.FDs = len(ents)
	}
	for _, p := range Processes(r.cfg.DaemonPID, r.cfg.FirstUID, r.cfg.LastUID) {
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); bytes.HasPrefix(cmd, []byte("aiod-sandbox\x00files\x00")) {
			l.Helpers++
			continue
		}
		l.pids = append(l.pids, p)
	}
	l.Processes = len(l.pids)
	return l, nil
}

// describe names the processes of now that were not in then.
func describe(now, then []int) []string {
	had := map[int]bool{}
	for _, p := range then {
		had[p] = true
	}
	var out []string
	for _, p := range now {
		if had[p] {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		var st syscall.Stat_t
		_ = syscall.Stat(fmt.Sprintf("/proc/%d", p), &st)
		c := strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")
		if len(c) > 120 {
			c = c[:120] + "…"
		}
		out = append(out, fmt.Sprintf("%d uid %d: %s", p, st.Uid, c))
	}
	return out
}

// Processes lists the live processes descended from pid, and those that
// run as a uid of first..last (a tenant's, wherever it was reparented).
func Processes(pid int, first, last uint32) []int {
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	var tenants []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[p] = pp
		var sys syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &sys) == nil && sys.Uid >= first && sys.Uid <= last && first > 0 {
			tenants = append(tenants, p)
		}
	}
	seen := map[int]bool{}
	for p := range parent {
		for q, n := p, 0; q > 1 && n < 64; q, n = parent[q], n+1 {
			if q == pid && p != pid {
				seen[p] = true
				break
			}
		}
	}
	for _, p := range tenants {
		seen[p] = true
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// surfaces asks each surface once, as the measured tenant, after the
// torture: each must answer.
func (r *run) surfaces(ctx context.Context, c *caller) {
	check := func(name string, st int, err error) {
		if err != nil {
			st = -1
		}
		r.rep.Surfaces[name] = st
		if st != 200 && st != 201 && st != 204 {
			r.note("surface "+name, failed, fmt.Sprintf("status %d %v", st, err))
		}
	}
	_, err := c.exec(ctx, "python", "measured", "print(n)", 60)
	check("rest python", statusOf(err), err)
	_, err = c.exec(ctx, "javascript", "", "console.log(1)", 60)
	check("rest javascript", statusOf(err), err)
	st, err := c.wsRun(ctx, "print(2)", false)
	check("websocket", st, err)
	st, err = c.sse(ctx, "print(3)", false)
	check("sse", st, err)
	st, _, err = c.call(ctx, "POST", "/v1/bash/exec", map[string]any{"command": "echo 4"}, 60*time.Second)
	check("bash", st, err)
	st, name, err := c.terminal(ctx)
	check("terminals", st, err)
	if name != "" {
		_, _, _ = c.call(ctx, "DELETE", "/api/terminals/"+name, nil, 30*time.Second)
	}
	st, _, err = c.call(ctx, "GET", "/api/kernels", nil, 30*time.Second)
	check("jupyter kernels", st, err)
	st, _, err = c.call(ctx, "GET", "/v2/fs/list?path=/tmp", nil, 30*time.Second)
	check("files", st, err)
	st, err = c.mcpInitialize(ctx)
	check("mcp", st, err)
}

// endAll deletes every caller's sessions, bash sessions and terminals.
func (r *run) endAll(ctx context.Context) {
	subs := []string{"measured", "paced"}
	for i := 0; i < r.cfg.Hostile; i++ {
		subs = append(subs, fmt.Sprintf("hostile-%d", i))
	}
	for i := 0; i < r.cfg.Callers-2-r.cfg.Hostile; i++ {
		subs = append(subs, fmt.Sprintf("mixed-%d", i))
	}
	for _, sub := range subs {
		c := newCaller(r, sub)
		var sess struct {
			Data struct {
				Sessions []struct {
					SessionID string `json:"session_id"`
				} `json:"sessions"`
			} `json:"data"`
		}
		if _, b, err := c.call(ctx, "GET", "/v2/code/sessions", nil, 30*time.Second); err == nil {
			_ = json.Unmarshal(b, &sess)
		}
		for _, s := range sess.Data.Sessions {
			_, _, _ = c.call(ctx, "DELETE", "/v2/code/sessions/"+s.SessionID, nil, 60*time.Second)
		}
		var terms []struct {
			Name string `json:"name"`
		}
		if _, b, err := c.call(ctx, "GET", "/api/terminals", nil, 30*time.Second); err == nil {
			_ = json.Unmarshal(b, &terms)
		}
		for _, t := range terms {
			_, _, _ = c.call(ctx, "DELETE", "/api/terminals/"+t.Name, nil, 30*time.Second)
		}
		var bash struct {
			Data []struct {
				SessionID string `json:"session_id"`
			} `json:"data"`
		}
		if _, b, err := c.call(ctx, "GET", "/v1/bash/sessions", nil, 30*time.Second); err == nil {
			_ = json.Unmarshal(b, &bash)
		}
		for _, s := range bash.Data {
			_, _, _ = c.call(ctx, "POST", "/v1/bash/sessions/"+s.SessionID+"/close", map[string]any{}, 30*time.Second)
		}
		_, _, _ = c.call(ctx, "DELETE", "/v1/shell/sessions", nil, 30*time.Second)
	}
}

// caller is one tenant.
type caller struct {
	r     *run
	sub   string
	token string
	rnd   *rand.Rand
	n     int // names of this caller's throwaway sessions
}

func newCaller(r *run, sub string) *caller {
	return &caller{r: r, sub: sub, token: r.cfg.Token(sub), rnd: rand.New(rand.NewPCG(rand.Uint64(), uint64(len(sub))))}
}

// httpError is an answer that was not 2xx.
type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string { return fmt.Sprintf("status %d: %s", e.status, oneLine(e.body)) }

func statusOf(err error) int {
	if err == nil {
		return 200
	}
	if he, ok := err.(*httpError); ok {
		return he.status
	}
	return -1
}

// call sends a JSON request with the caller's token and returns the
// status and body; the error is the transport's only.
func (c *caller) call(ctx context.Context, method, path string, body any, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.send(ctx, method, path, body, nil)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// send sends a request with body as JSON (nil: none), the caller's token
// and headers; the caller closes the answer's body.
func (c *caller) send(ctx context.Context, method, path string, body any, headers map[string]string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.r.cfg.URL+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return c.r.client.Do(req)
}

// exec runs code and returns its stdout; an answer other than 200 with
// status ok is an error (an *httpError for a status).
func (c *caller) exec(ctx context.Context, lang, sid, code string, timeout float64) (string, error) {
	body := map[string]any{"language": lang, "code": code, "timeout": timeout}
	if sid != "" {
		body["session_id"] = sid
	}
	st, b, err := c.call(ctx, "POST", "/v2/code/execute", body, time.Duration(timeout+30)*time.Second)
	if err != nil {
		return "", err
	}
	var env struct {
		Data struct {
			Status    string `json:"status"`
			ErrorKind string `json:"error_kind"`
			Stdout    string `json:"stdout"`
		} `json:"data"`
	}
	_ = json.Unmarshal(b, &env)
	if st != 200 {
		return "", &httpError{st, string(b)}
	}
	if env.Data.Status != "ok" {
		return env.Data.Stdout, fmt.Errorf("status %q, error_kind %q: %s", env.Data.Status, env.Data.ErrorKind, oneLine(string(b)))
	}
	return env.Data.Stdout, nil
}

// outcome classifies an action's error: nil is ok, a 429 or 503 refusal
// is refused, anything else failed.
func outcome(err error) int {
	if err == nil {
		return ok
	}
	if st := statusOf(err); st == 429 || st == 503 {
		return refused
	}
	return failed
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// measure runs a measured tenant's calls until ctx ends, one every pace
// (0: back to back): one counter incremented in its Python session.
func (c *caller) measure(ctx context.Context, pace time.Duration) Latency {
	var ms []float64
	var l Latency
	next := time.Now()
	for ctx.Err() == nil {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
			continue
		}
		next = time.Now().Add(pace)
		t0 := time.Now()
		_, err := c.exec(ctx, "python", "measured", "n += 1; print(n)", 60)
		if ctx.Err() != nil {
			break
		}
		l.Calls++
		if err != nil {
			l.Errors++
			c.r.note("measured", failed, err.Error())
			continue
		}
		ms = append(ms, float64(time.Since(t0))/float64(time.Millisecond))
	}
	if len(ms) > 0 {
		sort.Float64s(ms)
		l.P50, l.P99, l.Max = ms[len(ms)/2], ms[min(len(ms)-1, len(ms)*99/100)], ms[len(ms)-1]
	}
	return l
}

// mixed picks one action after another at random until ctx ends.
func (c *caller) mixed(ctx context.Context) {
	actions := []action{
		{"rest python", func(ctx context.Context) (int, string) {
			_, err := c.exec(ctx, "python", "py", "import random; print(random.random())", 60)
			return outcome(err), errText(err)
		}},
		{"rest javascript", func(ctx context.Context) (int, string) {
			_, err := c.exec(ctx, "javascript", "js", "console.log(Math.random())", 60)
			return outcome(err), errText(err)
		}},
		{"one-shot", func(ctx context.Context) (int, string) {
			oneShots := [][2]string{{"python", "print(1)"}, {"javascript", "console.log(1)"}, {"bash", "echo 1"}}
			o := oneShots[c.rnd.IntN(len(oneShots))]
			_, err := c.exec(ctx, o[0], "", o[1], 60)
			return outcome(err), errText(err)
		}},
		{"rest cancelled", func(ctx context.Context) (int, string) {
			// The client gives up after 300 ms; the execution goes on.
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, _ = c.exec(cctx, "python", "py", "import time; time.sleep(2)", 60)
			return ok, ""
		}},
		{"websocket", func(ctx context.Context) (int, string) {
			st, err := c.wsRun(ctx, "for i in range(50): print(i)", false)
			return classify(st, err), errText(err)
		}},
		{"websocket dropped", func(ctx context.Context) (int, string) {
			st, err := c.wsRun(ctx, "import time\nfor i in range(20): print(i, flush=True); time.sleep(0.05)", true)
			return classify(st, err), errText(err)
		}},
		{"sse unread", func(ctx context.Context) (int, string) {
			st, err := c.sse(ctx, "for i in range(200000): print('x' * 99)", true)
			return classify(st, err), errText(err)
		}},
		{"terminals", func(ctx context.Context) (int, string) {
			var names []string
			defer func() {
				for _, n := range names {
					_, _, _ = c.call(ctx, "DELETE", "/api/terminals/"+n, nil, 30*time.Second)
				}
			}()
			for range 3 {
				st, name, err := c.terminal(ctx)
				if st != 200 || err != nil {
					return classify(st, err), fmt.Sprintf("create: %d %v", st, err)
				}
				names = append(names, name)
			}
			st, _, err := c.call(ctx, "GET", "/api/terminals", nil, 30*time.Second)
			return classify(st, err), errText(err)
		}},
		{"bash", func(ctx context.Context) (int, string) {
			c.n++
			sid := fmt.Sprintf("b%d", c.n%3)
			st, b, err := c.call(ctx, "POST", "/v1/bash/exec", map[string]any{"command": "seq 1 20000 | tail -1", "session_id": sid}, 60*time.Second)
			if err == nil && st == 200 && !bytes.Contains(b, []byte("20000")) {
				return failed, "bash answered " + string(b)
			}
			if c.n%5 == 0 {
				_, _, _ = c.call(ctx, "POST", "/v1/bash/sessions/"+sid+"/close", map[string]any{}, 30*time.Second)
			}
			return classify(st, err), string(b)
		}},
		{"session ops", func(ctx context.Context) (int, string) {
			var st int
			var b []byte
			var err error
			switch c.rnd.IntN(4) {
			case 0:
				st, b, err = c.call(ctx, "POST", "/v2/code/sessions/py/interrupt", map[string]any{}, 30*time.Second)
			case 1:
				st, b, err = c.call(ctx, "POST", "/v2/code/sessions/py/restart", map[string]any{}, 90*time.Second)
			case 2:
				st, b, err = c.call(ctx, "POST", "/v2/code/sessions/py/snapshot", map[string]any{}, 90*time.Second)
			default:
				c.n++
				to := fmt.Sprintf("f%d", c.n%4)
				_, _, _ = c.call(ctx, "DELETE", "/v2/code/sessions/"+to, nil, 60*time.Second)
				st, b, err = c.call(ctx, "POST", "/v2/code/sessions/py/fork", map[string]any{"session_id": to}, 90*time.Second)
			}
			if st == 404 || st == 409 { // the session is not there yet, or its runtime was killed
				return ok, ""
			}
			return classify(st, err), string(b)
		}},
		{"kill kernel", func(ctx context.Context) (int, string) {
			// The kernel kills itself: a pid read from the sessions list
			// may be stale, and reused by another tenant's process.
			_, err := c.exec(ctx, "python", "py", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 60)
			if err != nil && strings.Contains(err.Error(), `error_kind "runtime_died"`) {
				err = nil
			}
			return outcome(err), errText(err)
		}},
	}
	c.loop(ctx, actions)
}

// classify is outcome for a status and a transport error.
func classify(st int, err error) int {
	switch {
	case err != nil:
		return failed
	case st >= 200 && st < 300:
		return ok
	case st == 429 || st == 503:
		return refused
	}
	return failed
}

// hostile plays a tenant that tries to take what others need.
func (c *caller) hostile(ctx context.Context) {
	plant := `import os
d = os.path.expanduser("~/.ipython/profile_default/startup")
os.makedirs(d, exist_ok=True)
open(d + "/00-hostile.py", "w").write("import subprocess, time\nsubprocess.Popen(['sleep', '600'], start_new_session=True)\ntime.sleep(5)\n")`
	actions := []action{
		{"hostile startup files", func(ctx context.Context) (int, string) {
			if _, err := c.exec(ctx, "python", "h0", plant, 60); err != nil {
				return outcome(err), errText(err)
			}
			var wg sync.WaitGroup
			for i := range 4 {
				c.n++
				sid := fmt.Sprintf("slow%d", c.n)
				wg.Go(func() {
					sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					defer cancel()
					_, _ = c.exec(sctx, "python", sid, "1", 60)
					_, _, _ = c.call(ctx, "DELETE", "/v2/code/sessions/"+sid, nil, 60*time.Second)
				})
				_ = i
			}
			wg.Wait()
			return ok, ""
		}},
		{"hostile fork bomb", func(ctx context.Context) (int, string) {
			_, _ = c.exec(ctx, "python", "bomb", `import os, time
n = 0
try:
    for i in range(100000):
        if os.fork() == 0:
            time.sleep(60); os._exit(0)
        n += 1
except OSError as e:
    print(n, e)`, 60)
			st, _, err := c.call(ctx, "DELETE", "/v2/code/sessions/bomb", nil, 60*time.Second)
			return classify(st, err), errText(err)
		}},
		{"hostile memory", func(ctx context.Context) (int, string) {
			_, err := c.exec(ctx, "python", "mem", "x = b'x' * (3 << 30)", 60)
			if err != nil && strings.Contains(err.Error(), `error_kind "out_of_memory"`) {
				err = nil // killed by its limit, as it should be
			}
			if err != nil && strings.Contains(err.Error(), "MemoryError") {
				err = nil
			}
			return outcome(err), errText(err)
		}},
		{"hostile ptys", func(ctx context.Context) (int, string) {
			_, err := c.exec(ctx, "python", "pty", `import os
fds = []
try:
    for i in range(700): fds.extend(os.openpty())
except OSError as e:
    print(len(fds) // 2, e)
for f in fds: os.close(f)`, 60)
			return outcome(err), errText(err)
		}},
		{"hostile snapshots", func(ctx context.Context) (int, string) {
			if _, err := c.exec(ctx, "python", "snap", "blob = b'x' * (32 << 20)", 60); err != nil {
				return outcome(err), errText(err)
			}
			for range 3 {
				st, b, err := c.call(ctx, "POST", "/v2/code/sessions/snap/snapshot", map[string]any{}, 90*time.Second)
				if o := classify(st, err); o == failed {
					return o, string(b)
				}
			}
			return ok, ""
		}},
		{"hostile busy loop", func(ctx context.Context) (int, string) {
			_, err := c.exec(ctx, "python", "spin", "import time\nt = time.time()\nwhile time.time() < t + 3: pass", 60)
			return outcome(err), errText(err)
		}},
	}
	c.loop(ctx, actions)
}

// wsRun executes Python on the WebSocket in session "ws" and reads until
// the result, or, with drop, closes the socket after the first output.
func (c *caller) wsRun(ctx context.Context, code string, drop bool) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(c.r.cfg.URL, "http") + "/v2/code/ws"
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + c.token}}})
	if err != nil {
		if resp != nil {
			return resp.StatusCode, nil
		}
		return 0, err
	}
	defer conn.CloseNow()
	conn.SetReadLimit(64 << 20)
	msg, _ := json.Marshal(map[string]any{"type": "execute", "id": "1", "language": "python", "session_id": "ws", "code": code})
	if err := conn.Write(ctx, websocket.MessageText, msg); err != nil {
		return 0, err
	}
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			return 0, err
		}
		var m struct {
			Type   string `json:"type"`
			Status int    `json:"status"`
		}
		_ = json.Unmarshal(b, &m)
		switch {
		case drop && m.Type != "accepted":
			return 200, nil // went away mid-execution
		case m.Type == "result":
			return 200, nil
		case m.Type == "error":
			return m.Status, nil
		}
	}
}

// sse executes Python with an SSE answer in session "sse" and reads it to
// the end, or, with stall, reads a little and stops reading for 2 s
// before it goes away.
func (c *caller) sse(ctx context.Context, code string, stall bool) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	resp, err := c.send(ctx, "POST", "/v2/code/execute", map[string]any{"language": "python", "session_id": "sse", "code": code, "timeout": 60},
		map[string]string{"Accept": "text/event-stream"})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil
	}
	if stall {
		buf := make([]byte, 4096)
		_, _ = io.ReadFull(resp.Body, buf)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
		return 200, nil
	}
	all, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if !bytes.Contains(all, []byte("event: result")) {
		return 0, fmt.Errorf("the stream ended without a result: %s", oneLine(string(all)))
	}
	return 200, nil
}

// terminal opens a terminal; its name when it did.
func (c *caller) terminal(ctx context.Context) (int, string, error) {
	st, b, err := c.call(ctx, "POST", "/api/terminals", map[string]any{}, 30*time.Second)
	var t struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(b, &t)
	return st, t.Name, err
}

// mcpInitialize opens an MCP session (streamable HTTP).
func (c *caller) mcpInitialize(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := c.send(ctx, "POST", "/mcp", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-03-26", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "torture", "version": "1"}}},
		map[string]string{"Accept": "application/json, text/event-stream"})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
		if r, err := c.send(ctx, "DELETE", "/mcp", nil, map[string]string{"Mcp-Session-Id": id}); err == nil {
			r.Body.Close()
		}
	}
	return resp.StatusCode, nil
}

// cpuSeconds is the user and system CPU pid's threads used so far.
func cpuSeconds(pid int) float64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(st)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // USER_HZ
}

// action is one thing a caller does; f answers its outcome and what was
// seen.
type action struct {
	name string
	f    func(context.Context) (int, string)
}

// loop does one of actions after another, at random, until ctx ends,
// noting each outcome (an action cut by the end is not counted).
func (c *caller) loop(ctx context.Context, actions []action) {
	for ctx.Err() == nil {
		a := actions[c.rnd.IntN(len(actions))]
		o, what := a.f(ctx)
		if ctx.Err() != nil {
			return
		}
		c.r.note(a.name, o, what)
	}
}
