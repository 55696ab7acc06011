// Package load drives a running aiod with concurrent executions over REST
// or WebSocket and checks every answer: the status, and that each output
// came back to the call that made it (a fast wrong answer is an error, not
// a result).
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config says what to run.
type Config struct {
	URL         string        // aiod base URL, e.g. http://127.0.0.1:18091
	Mode        string        // "rest" or "ws"
	Language    string        // "python" or "javascript"
	Code        string        // the snippet; a line printing a per-call token is appended
	Concurrency int           // workers, each with its own connection
	Sessions    bool          // each worker uses its own named session; false: one-shot calls
	Duration    time.Duration // run this long (when Count is 0)
	Count       int           // or this many calls in all
	Timeout     float64       // execution timeout sent with each call, seconds
	Token       string        // API token, when the daemon needs one
	Progress    io.Writer     // live progress lines; nil for none
	Warmup      int           // uncounted calls per worker before measuring
	// SessionPrefix names the sessions SessionPrefix-0, SessionPrefix-1, …
	// so that several runs can share them; empty: fresh names per run.
	SessionPrefix string
	// SessionCount, when > 0, makes workers share that many sessions
	// (worker w uses session w % SessionCount; calls on one session queue
	// there); 0: one session per worker.
	SessionCount int
}

// Report is what a run measured. Latencies are in milliseconds.
type Report struct {
	Mode        string         `json:"mode"`
	Language    string         `json:"language"`
	Concurrency int            `json:"concurrency"`
	Sessions    bool           `json:"sessions"`
	Calls       int            `json:"calls"`
	Errors      int            `json:"errors"`
	ErrorKinds  map[string]int `json:"error_kinds"`
	Examples    []string       `json:"error_examples"` // the first failures' messages, at most 5
	Seconds     float64        `json:"seconds"`
	PerSecond   float64        `json:"executions_per_second"`
	P50         float64        `json:"p50_ms"`
	P90         float64        `json:"p90_ms"`
	P99         float64        `json:"p99_ms"`
	Max         float64        `json:"max_ms"`
	Latencies   []float64      `json:"-"` // every successful call, for charts
}

// caller runs one call and returns its stdout, or an error saying what was
// wrong with the answer.
type caller interface {
	call(ctx context.Context, code, session string) (stdout string, err error)
	close()
}

// Run drives the daemon until cfg.Count calls or cfg.Duration have passed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Language == "" {
		cfg.Language = "python"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60
	}
	if cfg.Count <= 0 && cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	callers := make([]caller, cfg.Concurrency)
	for i := range callers {
		c, err := newCaller(ctx, cfg)
		if err != nil {
			for _, c := range callers[:i] {
				c.close()
			}
			return nil, err
		}
		callers[i] = c
	}
	defer func() {
		for _, c := range callers {
			c.close()
		}
	}()
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	prefix := cfg.SessionPrefix
	if prefix == "" {
		prefix = "aiobench-" + run
	}
	session := func(w int) string {
		if !cfg.Sessions {
			return ""
		}
		if cfg.SessionCount > 0 {
			w %= cfg.SessionCount
		}
		return fmt.Sprintf("%s-%d", prefix, w)
	}
	// Warm-up: starts each worker's session, not counted.
	var wg sync.WaitGroup
	warmErr := make(chan error, cfg.Concurrency)
	for w, c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range max(cfg.Warmup, 0) {
				tok := fmt.Sprintf("aiobench-warm-%d-%d", w, i)
				if _, err := check(ctx, c, cfg, tok, session(w)); err != nil {
					warmErr <- fmt.Errorf("warm-up: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(warmErr)
	if err := <-warmErr; err != nil {
		return nil, err
	}

	var (
		issued, done, failed atomic.Int64
		mu                   sync.Mutex
		lats                 []time.Duration
		kinds                = map[string]int{}
		examples             []string
	)
	runCtx := ctx
	if cfg.Count <= 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	stopProgress := progress(cfg.Progress, &done, &failed)
	start := time.Now()
	for w, c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; runCtx.Err() == nil; i++ {
				if cfg.Count > 0 && issued.Add(1) > int64(cfg.Count) {
					return
				}
				tok := fmt.Sprintf("aiobench-%s-%d-%d", run, w, i)
				d, err := check(ctx, c, cfg, tok, session(w))
				if err != nil && runCtx.Err() != nil && cfg.Count <= 0 {
					return // cut by the end of the run, not a wrong answer
				}
				mu.Lock()
				if err != nil {
					kinds[kind(err)]++
					if len(examples) < 5 {
						examples = append(examples, err.Error())
					}
					failed.Add(1)
				} else {
					lats = append(lats, d)
				}
				mu.Unlock()
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()
	r := report(cfg, lats, kinds, elapsed)
	r.Examples = examples
	return r, nil
}

// check runs one call and verifies its answer carries exactly its token.
func check(ctx context.Context, c caller, cfg Config, tok, session string) (time.Duration, error) {
	code := cfg.Code
	if code != "" && !strings.HasSuffix(code, "\n") {
		code += "\n"
	}
	if cfg.Language == "javascript" {
		code += "console.log('" + tok + "')"
	} else {
		code += "print('" + tok + "')"
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeout*float64(time.Second))+30*time.Second)
	defer cancel()
	t0 := time.Now()
	out, err := c.call(cctx, code, session)
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if !strings.HasSuffix(out, tok+"\n") {
		return 0, &wrongAnswer{fmt.Sprintf("stdout lacks the call's token %s: %.200q", tok, out)}
	}
	if strings.Count(out, "aiobench-") != 1 {
		return 0, &wrongAnswer{fmt.Sprintf("stdout holds another call's output: %.200q", out)}
	}
	return d, nil
}

type wrongAnswer struct{ msg string }

func (e *wrongAnswer) Error() string { return e.msg }

// statusError is an answer with the wrong HTTP status or execution status.
type statusError struct{ kind, msg string }

func (e *statusError) Error() string { return e.msg }

func kind(err error) string {
	var wa *wrongAnswer
	var se *statusError
	switch {
	case errors.As(err, &wa):
		return "wrong_output"
	case errors.As(err, &se):
		return se.kind
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "transport"
}

func report(cfg Config, lats []time.Duration, kinds map[string]int, elapsed time.Duration) *Report {
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	r := &Report{Mode: cfg.Mode, Language: cfg.Language, Concurrency: cfg.Concurrency, Sessions: cfg.Sessions,
		Calls: len(lats), ErrorKinds: kinds, Seconds: elapsed.Seconds()}
	for _, n := range kinds {
		r.Errors += n
	}
	if elapsed > 0 {
		r.PerSecond = float64(len(lats)) / elapsed.Seconds()
	}
	if len(lats) > 0 {
		r.P50, r.P90, r.P99 = ms(pct(lats, 50)), ms(pct(lats, 90)), ms(pct(lats, 99))
		r.Max = ms(lats[len(lats)-1])
	}
	r.Latencies = make([]float64, len(lats))
	for i, d := range lats {
		r.Latencies[i] = ms(d)
	}
	return r
}

// pct is the p-th percentile of sorted ds (nearest rank).
func pct(ds []time.Duration, p float64) time.Duration {
	i := int(p/100*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// progress prints done / errors / current rate every 250 ms until stopped.
func progress(w io.Writer, done, failed *atomic.Int64) (stop func()) {
	if w == nil {
		return func() {}
	}
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		last, lastAt := int64(0), time.Now()
		for {
			select {
			case <-quit:
				fmt.Fprintf(w, "\r%8d done %6d errors%20s\n", done.Load(), failed.Load(), "")
				return
			case now := <-t.C:
				n := done.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				fmt.Fprintf(w, "\r%8d done %6d errors %9.1f/s", n, failed.Load(), rate)
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}
