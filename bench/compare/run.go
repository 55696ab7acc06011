// Package compare measures aiod against its floor (ipykernel over zmq4,
// no HTTP) and its main alternative (Jupyter Server) in one run, plus
// one-shot calls against bare process starts and the daemon's memory.
package compare

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiod/aiod/bench/load"
	"github.com/aiod/aiod/kernel"
	"github.com/valyala/fasthttp"
)

// Config says how to run.
type Config struct {
	Quick bool
	Log   io.Writer // progress lines; nil for none
	// StartOnly runs the kernel start benchmark alone; NoStart skips it.
	StartOnly, NoStart bool
	// StartMax caps the live-sessions staircase (default 1000, quick 100);
	// StartBurst is the burst's size (default 64, quick 16).
	StartMax, StartBurst int
	// RestoreRows are the sizes of the snapshot and restore phase (rows
	// of a DataFrame; 0 a session without one); none skips it (StartOnly
	// does too). RestoreRounds is its restarts (5 when zero).
	RestoreRows   []int
	RestoreRounds int
}

// plan holds the sizes of one mode.
type plan struct {
	seqRounds, seqWarmup int
	concSeconds          float64
	concRepeats          int
	kernelsC16           int
	kernelsC64           int
	jupyterKernels       int
	oneshots             int
	oneshotWarm          int // uncounted rounds first
	prewarmKernelWarmup  bool
	rssNative            bool
	sessionsRSS          int
	startPar             int
}

func planFor(quick bool) plan {
	if quick {
		return plan{seqRounds: 100, seqWarmup: 3, concSeconds: 1.0, concRepeats: 1, kernelsC16: 4, kernelsC64: 4,
			jupyterKernels: 4, oneshots: 3, oneshotWarm: 0, prewarmKernelWarmup: false, rssNative: true, sessionsRSS: 100, startPar: 4}
	}
	return plan{seqRounds: 1000, seqWarmup: 20, concSeconds: 4, concRepeats: 8, kernelsC16: 16, kernelsC64: 64,
		jupyterKernels: 16, oneshots: 15, oneshotWarm: 1, prewarmKernelWarmup: true, rssNative: false, sessionsRSS: 100, startPar: 4}
}

const passCode = "pass"

type runner struct {
	cfg  Config
	p    plan
	run  string // marker of this run's processes
	dir  string
	res  *Result
	bin  string
	t0   time.Time
	logw io.Writer
	mu   sync.Mutex
	env  []string // for every process the run starts (IPYTHONDIR)
}

func (r *runner) logf(format string, args ...any) {
	if r.logw == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.logw, "[%5.1fs] %s\n", time.Since(r.t0).Seconds(), fmt.Sprintf(format, args...))
}

// Run measures everything and returns the result; an error means the run
// could not be made at all. Paths that failed are in Result.Failures.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if cfg.RestoreRounds <= 0 {
		cfg.RestoreRounds = 5
	}
	r := &runner{cfg: cfg, p: planFor(cfg.Quick), run: randHex(6), res: newResult(), t0: time.Now(), logw: cfg.Log}
	r.res.Mode = "full"
	if cfg.Quick {
		r.res.Mode = "quick"
	}
	if cfg.StartOnly {
		r.res.Mode += ", start benchmark only"
	}
	r.res.Date = time.Now().Format(time.RFC3339)
	r.res.Machine = machine()
	r.settings()
	r.dir, err = os.MkdirTemp("", "aiobench-compare-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if lerr := leftovers(r.run, 20*time.Second); lerr != nil {
			r.res.Failures["leftover_processes"] = lerr.Error()
			if err == nil {
				err = lerr
			}
		}
		if err == nil {
			os.RemoveAll(r.dir)
		} else {
			r.logf("logs kept in %s", r.dir)
		}
	}()
	if err := r.ipythonDir(); err != nil {
		return nil, err
	}
	if !cfg.StartOnly {
		if err := r.all(ctx); err != nil {
			return r.res, err
		}
		if len(cfg.RestoreRows) > 0 {
			r.restores(ctx)
		}
	}
	if cfg.StartOnly || !cfg.NoStart {
		if err := r.start(ctx); err != nil {
			return r.res, err
		}
	}
	r.res.Seconds = time.Since(r.t0).Seconds()
	r.res.Machine.LoadEnd = machine().LoadAvg
	r.res.derive()
	return r.res, nil
}

func (r *runner) settings() {
	s := &r.res.Settings
	p := r.p
	s.Code = passCode + "\nprint('<token>')"
	if !r.cfg.StartOnly {
		s.RestoreRows = r.cfg.RestoreRows
	}
	s.SequentialRounds = p.seqRounds
	s.Interleaving = fmt.Sprintf("each round makes one call on every path (floor, aiod REST, aiod WS, Jupyter Server), cycling through all 24 orders so each path follows each other path equally often; each path takes turns on %d kernels of its own", seqKernels(max(p.kernelsC16, p.kernelsC64)))
	s.ConcurrentSeconds = p.concSeconds
	s.ConcurrentRepeats = p.concRepeats
	s.KernelsC16, s.KernelsC64 = p.kernelsC16, p.kernelsC64
	s.StreamsPerKernel.C16, s.StreamsPerKernel.C64 = 16/p.kernelsC16, 64/p.kernelsC64
	s.JupyterKernelsC16, s.JupyterStreamsPerK = p.jupyterKernels, 16/p.jupyterKernels
	s.OneshotCalls = p.oneshots
	s.PrewarmKernelWarm = p.prewarmKernelWarmup
	s.FloorKernel = "ipykernel started by package kernel, which then imports " + strings.Join(kernel.DefaultPreload, ", ") +
		" and freezes the garbage collector, as aiod's kernel templates do before they fork (--kernel-warmup, on by default)"
	s.IPythonHistory = "in memory for every kernel (IPYTHONDIR with c.HistoryAccessor.hist_file=':memory:'): with one shared history.sqlite, dozens of kernels collide and IPython prints 'database is locked' into stdout"

	if p.rssNative {
		s.RSSSessions = fmt.Sprintf("%d native Python REPL sessions (a second daemon with AIO_CODE_BACKEND=native; quick mode)", p.sessionsRSS)
		s.RSSFlood = "one-shot Python (native REPL) printing 100 MiB, capped by aiod (its 8 MiB output budget: head and tail, counted twice); peak = max(VmRSS sampled every 5 ms, VmHWM reset before)"
	} else {
		s.RSSSessions = fmt.Sprintf("%d Python kernel sessions (a fresh daemon with AIO_CODE_BACKEND=kernel)", p.sessionsRSS)
		s.RSSFlood = "one-shot Python (kernel) printing 100 MiB, capped by aiod (its 8 MiB output budget: head and tail, counted twice); peak = max(VmRSS sampled every 5 ms, VmHWM reset before)"
	}
}

// ipythonDir makes the IPYTHONDIR every kernel of the run gets (floor,
// aiod, Jupyter Server alike): its profile keeps IPython's history in
// memory. With the default, every kernel writes each execution to the one
// ~/.ipython/profile_default/history.sqlite; past a few dozen kernels the
// writers collide and IPython prints "The history saving thread hit an
// unexpected error (OperationalError('database is locked'))" into the
// execution's stdout, which the token check rightly counts as a wrong
// answer.
func (r *runner) ipythonDir() error {
	dir := filepath.Join(r.dir, "ipython")
	prof := filepath.Join(dir, "profile_default")
	if err := os.MkdirAll(prof, 0o755); err != nil {
		return err
	}
	conf := "c.HistoryAccessor.hist_file = ':memory:'\n"
	for _, f := range []string{"ipython_kernel_config.py", "ipython_config.py"} {
		if err := os.WriteFile(filepath.Join(prof, f), []byte(conf), 0o644); err != nil {
			return err
		}
	}
	r.env = []string{"IPYTHONDIR=" + dir}
	return nil
}

// stage is what the main phase holds.
type stage struct {
	floor    []*floorKernel
	main     *daemon
	jup      *jupyterServer
	jks      []*jupyterKernel
	prefix   string // aiod session names
	restSeq  *load.Client
	wsSeq    *load.Client
	wsSeqErr error
}

func (r *runner) all(ctx context.Context) error {
	st := &stage{prefix: "aiobench-" + r.run}
	defer r.teardown(st)
	if err := r.setup(ctx, st); err != nil {
		return err
	}
	r.sequential(ctx, st)
	r.concurrent(ctx, st)
	r.oneshotCold(ctx, st)
	r.teardown(st)
	if err := r.oneshotWarm(ctx); err != nil {
		return err
	}
	return r.memory(ctx)
}

// setup starts the floor's kernels, the main daemon with its sessions and
// Jupyter Server with its kernels, all at once.
func (r *runner) setup(ctx context.Context, st *stage) error {
	nk := max(r.p.kernelsC16, r.p.kernelsC64)
	r.logf("compare (%s): starting %d floor kernels, aiod with %d sessions, Jupyter Server with %d kernels", r.res.Mode, nk, nk, r.p.jupyterKernels)
	var wg sync.WaitGroup
	var floorErr, mainErr, jupErr error
	wg.Add(3)
	go func() {
		defer wg.Done()
		st.floor, floorErr = startFloor(ctx, r.run, r.env, nk, r.p.startPar)
		r.logf("floor: %d kernels up", len(st.floor))
	}()
	go func() {
		defer wg.Done()
		r.logf("building aiod (go build ./cmd/aiod)")
		if r.bin, mainErr = buildDaemon(ctx, r.dir); mainErr != nil {
			return
		}
		st.main, mainErr = startDaemon(ctx, "main", r.bin, r.dir, r.run, append(r.env,
			"AIO_CODE_BACKEND=kernel", "AIO_KERNEL_PREWARM=0", "AIO_CODE_PREWARM=0", "AIO_KERNEL_IDLE=3600")...)
		if mainErr != nil {
			return
		}
		mainErr = r.openSessions(ctx, st.main, st.prefix, nk)
		r.logf("aiod: %d sessions up", nk)
	}()
	go func() {
		defer wg.Done()
		st.jup, jupErr = startJupyter(ctx, r.run, r.dir, r.env...)
		if jupErr != nil {
			r.res.fail("seq/"+Jupyter, jupErr)
			return
		}
		st.jks = make([]*jupyterKernel, r.p.jupyterKernels)
		errs := make([]error, len(st.jks))
		var kw sync.WaitGroup
		sem := make(chan struct{}, r.p.startPar)
		for i := range st.jks {
			kw.Add(1)
			go func() {
				defer kw.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				k, err := st.jup.newKernel(ctx)
				if err == nil {
					// The first execute waits for the kernel to be up.
					_, err = k.exec(ctx, "pass")
				}
				st.jks[i], errs[i] = k, err
			}()
		}
		kw.Wait()
		for _, e := range errs {
			if e != nil {
				jupErr = e
			}
		}
		r.logf("Jupyter Server: %d kernels up", len(st.jks))
	}()
	wg.Wait()
	if floorErr != nil {
		return floorErr
	}
	if mainErr != nil {
		return mainErr
	}
	if jupErr != nil {
		r.res.fail("seq/"+Jupyter, jupErr)
		r.res.fail("c16/"+Jupyter, jupErr)
		st.jks = nil
	}
	var err error
	st.restSeq, err = load.NewClient(ctx, load.Config{URL: st.main.url, Mode: "rest", Code: passCode})
	if err != nil {
		return err
	}
	st.wsSeq, st.wsSeqErr = load.NewClient(ctx, load.Config{URL: st.main.url, Mode: "ws", Code: passCode})
	if st.wsSeqErr != nil {
		st.wsSeqErr = fmt.Errorf("aiod WebSocket: %w", st.wsSeqErr)
		r.logf("FAILED: %v", st.wsSeqErr)
	}
	return nil
}

// openSessions starts n sessions prefix-0 … prefix-(n-1) with one call each.
func (r *runner) openSessions(ctx context.Context, d *daemon, prefix string, n int) error {
	c, err := load.NewClient(ctx, load.Config{URL: d.url, Mode: "rest", Code: passCode, Timeout: 300})
	if err != nil {
		return err
	}
	defer c.Close()
	errs := make(chan error, n)
	sem := make(chan struct{}, r.p.startPar)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := c.Call(ctx, fmt.Sprintf("aiobench-open-%d", i), fmt.Sprintf("%s-%d", prefix, i)); err != nil {
				errs <- fmt.Errorf("aiod %s: open session %d: %w", d.name, i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// sequential makes the rounds, one call per path per round, rotating the
// order so that noise hits every path alike.
func (r *runner) sequential(ctx context.Context, st *stage) {
	type path struct {
		name string
		call func(tok string) (float64, error)
	}
	// Each path has kernels of its own, seqKernels of them, and its calls
	// go to them in turn: one kernel can be faster or slower than another
	// for the whole run (where its pages and its threads landed), which
	// moved a path's p50 by up to 0.4 ms when each path had one.
	k := seqKernels(len(st.floor))
	var turn int
	paths := []path{
		{Floor, func(tok string) (float64, error) { return timeConn(ctx, st.floor[turn%k], tok) }},
		{REST, func(tok string) (float64, error) {
			d, err := st.restSeq.Call(ctx, tok, fmt.Sprintf("%s-%d", st.prefix, turn%k))
			return ms(d), err
		}},
	}
	if st.wsSeqErr == nil {
		paths = append(paths, path{WS, func(tok string) (float64, error) {
			d, err := st.wsSeq.Call(ctx, tok, fmt.Sprintf("%s-%d", st.prefix, k+turn%k))
			return ms(d), err
		}})
	} else {
		r.res.fail("seq/"+WS, st.wsSeqErr)
	}
	if len(st.jks) > 0 {
		paths = append(paths, path{Jupyter, func(tok string) (float64, error) {
			return timeConn(ctx, st.jks[turn%min(k, len(st.jks))], tok)
		}})
	}
	r.logf("sequential: %d rounds over %d paths", r.p.seqRounds, len(paths))
	lats := make([][]float64, len(paths))
	errs := make([]int, len(paths))
	firstErr := make([]error, len(paths))
	perms := permutations(len(paths))
	for round := -r.p.seqWarmup; round < r.p.seqRounds; round++ {
		turn = round + r.p.seqWarmup
		for _, i := range perms[max(round, 0)%len(perms)] {
			tok := fmt.Sprintf("aiobench-%s-seq-%s-%d", r.run, paths[i].name, round)
			d, err := paths[i].call(tok)
			if round < 0 {
				continue
			}
			if err != nil {
				errs[i]++
				if firstErr[i] == nil {
					firstErr[i] = err
				}
				continue
			}
			lats[i] = append(lats[i], d)
		}
		if ctx.Err() != nil {
			break
		}
	}
	for i, p := range paths {
		s := summarize(lats[i], errs[i], 0)
		if errs[i] > 0 {
			s.Err = fmt.Sprintf("%d of %d calls failed, first: %v", errs[i], r.p.seqRounds, firstErr[i])
			r.res.Failures["seq/"+p.name] = s.Err
		}
		r.res.Runs["seq/"+p.name] = s
		r.logf("sequential %-15s p50 %7.2f ms  p99 %7.2f ms  (%d calls, %d errors)", p.name, s.P50, s.P99, s.Calls, errs[i])
	}
	r.hop(ctx, st.main.url)
}

// seqKernels is how many kernels each path of the sequential rounds
// takes turns on, of the n the floor and aiod each started: up to 8, and
// at most half of n, REST and the WebSocket having a half of aiod's
// sessions each. Jupyter Server's path takes as many of its kernels, or
// all it has.
func seqKernels(n int) int {
	return max(1, min(8, n/2))
}

// hop times GET /healthz on the daemon at url, back to back and after an
// idle pause like the one a sequential call follows (see Hop).
func (r *runner) hop(ctx context.Context, url string) {
	const idle = 6 * time.Millisecond
	n := max(r.p.seqRounds/4, 50)
	c := &fasthttp.HostClient{Addr: strings.TrimPrefix(url, "http://"), NoDefaultUserAgentHeader: true}
	defer c.CloseIdleConnections()
	p50 := func(pause time.Duration) (float64, error) {
		lat := make([]float64, 0, n)
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(url + "/healthz")
		for i := -5; i < n && ctx.Err() == nil; i++ {
			if pause > 0 {
				time.Sleep(pause)
			}
			t0 := time.Now()
			if err := c.DoTimeout(req, resp, 10*time.Second); err != nil {
				return 0, err
			}
			if resp.StatusCode() != fasthttp.StatusOK {
				return 0, fmt.Errorf("GET /healthz: HTTP %d", resp.StatusCode())
			}
			if i >= 0 {
				lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e3)
			}
		}
		return summarize(lat, 0, 0).P50, nil
	}
	warm, err := p50(0)
	if err != nil {
		r.res.Notes = append(r.res.Notes, "hop not measured: "+err.Error())
		return
	}
	cold, err := p50(idle)
	if err != nil {
		r.res.Notes = append(r.res.Notes, "hop not measured: "+err.Error())
		return
	}
	r.res.Hop = &Hop{BackToBack: math.Round(warm), AfterIdle: math.Round(cold), IdleMs: float64(idle.Milliseconds())}
	r.logf("hop: GET /healthz p50 %.0f µs back to back, %.0f µs after %v idle (%d each)", warm, cold, idle, n)
	r.res.Notes = append(r.res.Notes, fmt.Sprintf("hop: a GET /healthz round trip to aiod takes %.0f µs (p50) back to back and %.0f µs after %v idle; a sequential REST call adds about one idle round trip to the floor's path", warm, cold, idle))
}

// timeConn runs one token call on c and checks it.
func timeConn(ctx context.Context, c execConn, tok string) (float64, error) {
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	t0 := time.Now()
	out, err := c.exec(cctx, tokenCode(passCode, tok, "python"))
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if err := checkToken(out, tok); err != nil {
		return 0, err
	}
	return ms(d), nil
}

// runConns drives conns with streams workers for dur (worker w uses conn
// w % len(conns)), after one uncounted call per worker.
func (r *runner) runConns(ctx context.Context, name string, conns []execConn, streams int, dur time.Duration) *Summary {
	var (
		mu       sync.Mutex
		lats     []float64
		nerr     int
		firstErr error
		wg       sync.WaitGroup
	)
	note := func(d float64, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			nerr++
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		lats = append(lats, d)
	}
	for w := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := timeConn(ctx, conns[w%len(conns)], fmt.Sprintf("aiobench-%s-%s-warm-%d", r.run, name, w)); err != nil {
				note(0, err)
			}
		}()
	}
	wg.Wait()
	if nerr > 0 {
		return &Summary{Errors: nerr, Err: fmt.Sprintf("warm-up: %v", firstErr)}
	}
	runCtx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var seq atomic.Int64
	start := time.Now()
	for w := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := conns[w%len(conns)]
			for runCtx.Err() == nil {
				tok := fmt.Sprintf("aiobench-%s-%s-%d", r.run, name, seq.Add(1))
				d, err := timeConn(ctx, c, tok)
				note(d, err)
			}
		}()
	}
	wg.Wait()
	s := summarize(lats, nerr, time.Since(start).Seconds())
	if nerr > 0 {
		s.Err = fmt.Sprintf("%d calls failed, first: %v", nerr, firstErr)
	}
	return s
}

// merge adds b's calls to a (repeated runs of one path).
func merge(a, b *Summary) *Summary {
	if a == nil {
		return b
	}
	if a.Err != "" || b.Err != "" {
		if a.Err == "" {
			return b
		}
		return a
	}
	m := summarize(append(slices.Clone(a.Latencies), b.Latencies...), a.Errors+b.Errors, a.Seconds+b.Seconds)
	return m
}

// concurrent runs c16 and c64 on every path; with repeats, the order of
// the paths reverses on each repeat.
func (r *runner) concurrent(ctx context.Context, st *stage) {
	dur := time.Duration(r.p.concSeconds * float64(time.Second))
	floorConns := func(n int) []execConn {
		out := make([]execConn, n)
		for i := range n {
			out[i] = st.floor[i]
		}
		return out
	}
	aiod := func(mode string, c, sessions int) *Summary {
		rep, err := load.Run(ctx, load.Config{URL: st.main.url, Mode: mode, Code: passCode, Concurrency: c, Sessions: true,
			Duration: dur, Warmup: 1, SessionPrefix: st.prefix, SessionCount: sessions})
		if err != nil {
			return &Summary{Err: err.Error()}
		}
		s := summarize(rep.Latencies, rep.Errors, rep.Seconds)
		if rep.Errors > 0 {
			s.Err = fmt.Sprintf("%d calls failed: %v", rep.Errors, rep.ErrorKinds)
		}
		return s
	}
	for _, c := range []int{16, 64} {
		nk := r.p.kernelsC16
		if c == 64 {
			nk = r.p.kernelsC64
		}
		type job struct {
			name string
			f    func() *Summary
		}
		jobs := []job{
			{Floor, func() *Summary { return r.runConns(ctx, fmt.Sprintf("c%d-floor", c), floorConns(nk), c, dur) }},
			{REST, func() *Summary { return aiod("rest", c, nk) }},
			{WS, func() *Summary { return aiod("ws", c, nk) }},
		}
		if c == 16 && len(st.jks) > 0 {
			jc := make([]execConn, len(st.jks))
			for i, k := range st.jks {
				jc[i] = k
			}
			jobs = append(jobs, job{Jupyter, func() *Summary { return r.runConns(ctx, "c16-jupyter", jc, 16, dur) }})
		}
		for rep := range r.p.concRepeats {
			order := slices.Clone(jobs)
			if rep%2 == 1 {
				slices.Reverse(order)
			}
			for _, j := range order {
				key := fmt.Sprintf("c%d/%s", c, j.name)
				s := j.f()
				r.res.Runs[key] = merge(r.res.Runs[key], s)
				if s.Err != "" {
					r.res.Failures[key] = s.Err
					r.logf("c%d %-15s FAILED: %s", c, j.name, s.Err)
					continue
				}
				r.logf("c%d %-15s %8.1f exec/s  p50 %7.2f ms  (%d calls)", c, j.name, s.PerSecond, s.P50, s.Calls)
			}
		}
	}
}

// oneshotCold times one-shot calls on the main daemon (no pools), call by
// call interleaved with bare python3 -c and node -e process starts.
func (r *runner) oneshotCold(ctx context.Context, st *stage) {
	py, err1 := load.NewClient(ctx, load.Config{URL: st.main.url, Mode: "rest", Code: passCode})
	js, err2 := load.NewClient(ctx, load.Config{URL: st.main.url, Mode: "rest", Language: "javascript"})
	if err1 != nil || err2 != nil {
		r.res.fail("oneshot/"+PyCold, fmt.Errorf("%v %v", err1, err2))
		return
	}
	defer py.Close()
	defer js.Close()
	calls := map[string]func(tok string) (float64, error){
		PyCold: func(tok string) (float64, error) { d, err := py.Call(ctx, tok, ""); return ms(d), err },
		JSCold: func(tok string) (float64, error) { d, err := js.Call(ctx, tok, ""); return ms(d), err },
		PyProc: func(tok string) (float64, error) {
			return timeProcess(tok+"\n", "/usr/bin/python3", "-c", tokenCode(passCode, tok, "python"))
		},
		NodeProc: func(tok string) (float64, error) {
			return timeProcess(tok+"\n", "node", "-e", tokenCode("", tok, "javascript"))
		},
	}
	r.logf("one-shots, cold: %d calls each", r.p.oneshots)
	r.interleave(ctx, []string{PyCold, JSCold, PyProc, NodeProc}, calls, r.p.oneshotWarm)
}

// interleave makes n rounds (after warm uncounted ones) of one call per
// name, rotating the order, and records oneshot/NAME.
func (r *runner) interleave(ctx context.Context, names []string, calls map[string]func(string) (float64, error), warm int) {
	lats := map[string][]float64{}
	errs := map[string]error{}
	perms := permutations(len(names))
	for round := -warm; round < r.p.oneshots && ctx.Err() == nil; round++ {
		for _, j := range perms[max(round, 0)%len(perms)] {
			name := names[j]
			if errs[name] != nil {
				continue
			}
			tok := fmt.Sprintf("aiobench-%s-oneshot-%s-%d", r.run, name, round)
			d, err := calls[name](tok)
			if err != nil {
				errs[name] = err
				continue
			}
			if round >= 0 {
				lats[name] = append(lats[name], d)
			}
		}
	}
	for _, name := range names {
		if errs[name] != nil {
			r.res.fail("oneshot/"+name, errs[name])
			r.logf("one-shot %-15s FAILED: %v", name, errs[name])
			continue
		}
		s := summarize(lats[name], 0, 0)
		r.res.Runs["oneshot/"+name] = s
		r.logf("one-shot %-15s p50 %8.2f ms", name, s.P50)
	}
}

// teardown stops the floor, Jupyter Server and the main daemon, at once.
func (r *runner) teardown(st *stage) {
	var wg sync.WaitGroup
	if st.restSeq != nil {
		st.restSeq.Close()
		st.restSeq = nil
	}
	if st.wsSeq != nil {
		st.wsSeq.Close()
		st.wsSeq = nil
	}
	for _, k := range st.floor {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = k.close(ctx)
		}()
	}
	st.floor = nil
	for _, k := range st.jks {
		k.close()
	}
	st.jks = nil
	if st.jup != nil {
		wg.Add(1)
		go func(j *jupyterServer) { defer wg.Done(); j.stop() }(st.jup)
		st.jup = nil
	}
	if st.main != nil {
		wg.Add(1)
		go func(d *daemon) { defer wg.Done(); d.stop() }(st.main)
		st.main = nil
	}
	wg.Wait()
}

// oneshotWarm times one-shots on a daemon with AIO_KERNEL_PREWARM=2 and
// AIO_CODE_PREWARM=2, waiting for both pools to be full before each call.
func (r *runner) oneshotWarm(ctx context.Context) error {
	env := []string{"AIO_CODE_BACKEND=kernel", "AIO_KERNEL_PREWARM=2", "AIO_CODE_PREWARM=2"}
	if !r.p.prewarmKernelWarmup {
		env = append(env, "AIO_KERNEL_WARMUP=false")
	}
	r.logf("one-shots, prewarmed: starting aiod with %v", env)
	d, err := startDaemon(ctx, "prewarm", r.bin, r.dir, r.run, append(r.env, env...)...)
	if err != nil {
		return err
	}
	defer d.stop()
	py, err := load.NewClient(ctx, load.Config{URL: d.url, Mode: "rest", Code: passCode})
	if err != nil {
		return err
	}
	defer py.Close()
	js, err := load.NewClient(ctx, load.Config{URL: d.url, Mode: "rest", Language: "javascript"})
	if err != nil {
		return err
	}
	defer js.Close()
	ready := func() error {
		if err := d.waitPool(ctx, "kernel", 2); err != nil {
			return err
		}
		return d.waitPool(ctx, "javascript", 2)
	}
	calls := map[string]func(string) (float64, error){
		PyWarm: func(tok string) (float64, error) {
			if err := ready(); err != nil {
				return 0, err
			}
			dd, err := py.Call(ctx, tok, "")
			return ms(dd), err
		},
		JSWarm: func(tok string) (float64, error) {
			if err := ready(); err != nil {
				return 0, err
			}
			dd, err := js.Call(ctx, tok, "")
			return ms(dd), err
		},
	}
	r.interleave(ctx, []string{PyWarm, JSWarm}, calls, 0)
	return nil
}

// memory measures a fresh daemon's RSS idle, idle with the sessions, and
// at its peak during a one-shot 100 MB print.
func (r *runner) memory(ctx context.Context) error {
	env := []string{"AIO_CODE_BACKEND=kernel", "AIO_KERNEL_IDLE=3600"}
	if r.p.rssNative {
		env = []string{"AIO_CODE_BACKEND=native", "AIO_NATIVE_IDLE=3600"}
	}
	r.logf("memory: starting aiod with %v", env)
	d, err := startDaemon(ctx, "memory", r.bin, r.dir, r.run, append(r.env, env...)...)
	if err != nil {
		return err
	}
	defer d.stop()
	time.Sleep(500 * time.Millisecond)
	if rss, _, err := procStatus(d.pid()); err == nil {
		r.res.RSS["idle_start"] = rss
	}
	r.logf("memory: opening %d sessions", r.p.sessionsRSS)
	if err := r.openSessions(ctx, d, "aiobench-rss-"+r.run, r.p.sessionsRSS); err != nil {
		r.res.Failures["rss/idle_100_sessions"] = err.Error()
		return nil
	}
	time.Sleep(1500 * time.Millisecond)
	var samples []float64
	for range 5 {
		rss, _, err := procStatus(d.pid())
		if err != nil {
			return err
		}
		samples = append(samples, rss)
		time.Sleep(200 * time.Millisecond)
	}
	r.res.RSS["idle_100_sessions"] = Percentile(samples, 50)
	r.logf("memory: idle with %d sessions: %.1f MiB", r.p.sessionsRSS, r.res.RSS["idle_100_sessions"])

	reset := resetHWM(d.pid())
	if !reset {
		r.res.Notes = append(r.res.Notes, "could not reset VmHWM before the flood: its peak may predate it")
	}
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, _, err := procStatus(d.pid()); err == nil && uint64(rss*1024) > peak.Load() {
				peak.Store(uint64(rss * 1024))
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	const flood = "import sys\nline='y'*1023+'\\n'\nfor i in range(100*1024):\n    sys.stdout.write(line)\nprint('THE END')"
	a, err := d.execute(ctx, map[string]any{"language": "python", "code": flood, "timeout": 300})
	close(stop)
	<-sampled
	if err != nil {
		r.res.Failures["rss/flood_100mb"] = err.Error()
		return nil
	}
	// Stream text counts twice against the 8 MiB --output-budget (in
	// outputs and in stdout): stdout keeps about half of it.
	if !a.Data.Truncated || len(a.Data.Stdout) > 9<<20+64<<10 || len(a.Data.Stdout) < 4<<20 || !hasSuffix(a.Data.Stdout, "THE END\n") {
		r.res.Failures["rss/flood_100mb"] = fmt.Sprintf("flood answer: truncated %v, %d bytes of stdout, ends %q",
			a.Data.Truncated, len(a.Data.Stdout), a.Data.Stdout[max(0, len(a.Data.Stdout)-20):])
	}
	r.res.FloodStdoutBytes = len(a.Data.Stdout)
	_, hwm, _ := procStatus(d.pid())
	r.res.RSS["flood_100mb"] = max(float64(peak.Load())/1024, hwm)
	r.logf("memory: peak during the flood: %.1f MiB (sampled %.1f, VmHWM %.1f); %d bytes of stdout kept",
		r.res.RSS["flood_100mb"], float64(peak.Load())/1024, hwm, len(a.Data.Stdout))
	return nil
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }
