// Command aiod is the execution gateway daemon: Python in Jupyter kernels
// (or a native REPL) and JavaScript in Node.js REPLs, over REST and
// WebSocket on one port.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"syscall"
	"time"

	"github.com/aiod/aiod/cmd/aiod/sysmon"
	"github.com/aiod/aiod/gateway"
)

func main() {
	sysmon.KeepAwake()
	setProcs()
	if err := run(os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "aiod:", err)
		var ue *usageError
		if errors.As(err, &ue) {
			os.Exit(2) // a setting that cannot work: nothing was started
		}
		os.Exit(1)
	}
}

// setProcs gives Go's scheduler half the CPUs aiod may use (at least one)
// unless GOMAXPROCS says otherwise. The kernels do the heavy work and
// need the cores; aiod's share of a call is small, and every processor
// the scheduler has idle costs thread wake-ups: on this 2-core machine a
// sequential execute took 27 context switches and 0.74 ms of aiod's CPU
// with 2 processors, 14 and 0.59-0.65 ms with one (bench/README.md).
func setProcs() {
	if _, ok := os.LookupEnv("GOMAXPROCS"); ok {
		return
	}
	runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)/2))
}

// run is main without the exit, for tests. ready, when set, receives the
// bound address once the daemon serves.
func run(args []string, stdout, stderr io.Writer, ready chan<- string) error {
	o, err := parseOptions(args, os.LookupEnv, stderr)
	if err != nil {
		if errors.Is(err, errHelp) {
			return nil
		}
		if errors.Is(err, errVersion) {
			fmt.Fprintln(stdout, gateway.Build())
			return nil
		}
		return err
	}
	log := newLogger(stderr, o.logLevel, o.logFormat)
	// The access log's lines are written in batches (lineBuffer); every
	// other line at once.
	accessOut := newLineBuffer(stderr, lineFlushAfter)
	defer accessOut.Close() //nolint:errcheck // the last lines, at exit
	_, userLimit := os.LookupEnv("GOMEMLIMIT")
	if !userLimit && o.memoryLimit > 0 {
		// A soft limit: the GC works harder near it instead of letting the
		// heap double after a burst (kernels are separate processes).
		debug.SetMemoryLimit(int64(o.memoryLimit))
	}
	// Every refusal before aiod serves exits 2, as a setting that cannot
	// work does: a state directory another daemon holds, an address (or
	// --pprof-addr) in use, an isolation that is not possible with these
	// settings.
	unlock, err := lockStateDir(o.stateDir)
	if err != nil {
		return startRefused(err)
	}
	defer unlock()
	ln, activated, err := listen(o.addr)
	if err != nil {
		return startRefused(err)
	}
	if o.pprofAddr != "" {
		stopPprof, err := startPprof(o.pprofAddr, log)
		if err != nil {
			ln.Close()
			return startRefused(fmt.Errorf("--pprof-addr %s: %w; give a free loopback address", o.pprofAddr, err))
		}
		defer stopPprof()
	}
	gcfg := o.gatewayConfig(log)
	gcfg.AccessLogger = newLogger(accessOut, o.logLevel, o.logFormat)
	if gcfg.Cluster.NATS != "" && gcfg.Cluster.Advertise == "" {
		gcfg.Cluster.Advertise = ln.Addr().String()
		if err := checkAdvertise(gcfg.Cluster.Advertise, "the listening address"); err != nil {
			ln.Close()
			return startRefused(err)
		}
	}
	srv, err := gateway.New(gcfg)
	if err != nil {
		ln.Close()
		return startRefused(err)
	}
	env := srv.Environment()
	iso := srv.TenantIsolation("")
	log.Info("aiod started", "addr", ln.Addr().String(), "socket_activation", activated, "version", gateway.Version,
		"python_backend", env.PythonBackend, "python_problem", env.BackendError,
		"node", env.Node.Version, "node_problem", env.Node.Error,
		"isolation", iso.Mode, "isolation_off_because", iso.Why, "runtime_network", iso.Network, "state_dir", o.stateDir)
	for _, w := range env.Warnings {
		log.Warn("discovery", "warning", w)
	}
	if !userLimit && o.memoryLimit > 0 {
		lctx, stopLimits := context.WithCancel(context.Background())
		limited := make(chan struct{})
		go func() {
			defer close(limited)
			followHeld(lctx, int64(o.memoryLimit), srv.HeldBytes)
		}()
		defer func() { stopLimits(); <-limited }()
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if ready != nil {
		ready <- ln.Addr().String()
	}

	var serveErr error
	select {
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String())
	case serveErr = <-served:
		log.Error("server stopped", "err", serveErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	go func() {
		// A second signal cuts the drain short; runtimes are still killed.
		select {
		case sig := <-sigs:
			log.Warn("second signal: stopping now", "signal", sig.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	err = srv.Shutdown(ctx)
	log.Info("stopped", "took", time.Since(start).Round(time.Millisecond).String(), "err", err)
	if serveErr != nil {
		return serveErr
	}
	return nil
}

// startRefused is err as a *usageError (exit code 2), unless it is one.
func startRefused(err error) error {
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	return &usageError{err.Error()}
}

func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// heldHeadroom is how far above what aiod holds the soft memory limit sits
// once that passes --memory-limit.
const heldHeadroom = 16 << 20

// followEvery is how often followHeld reads what aiod holds and its live
// heap: a limit left below a heap that just grew makes the GC run back to
// back until the next read.
const followEvery = 250 * time.Millisecond

// softLimit is the soft memory limit for a --memory-limit of base, held
// bytes aiod holds on purpose (retained executions, the outputs and logs
// of running ones, a cost per live runtime), the buffers among them (the
// bytes of text, records and messages in held) and a live heap (marked at
// the last GC): the largest of base, held + 16 MiB, and the live heap with
// what it has beyond buffers counted twice, + 16 MiB and an eighth of the
// buffers.
//
// base bounds the daemon's working memory while what it holds is small:
// a flood's bytes are garbage at once, and the GC works harder near base
// instead of letting the heap double after a burst. A limit under twice
// the live heap's pointers would do nothing but that: it makes the GC run
// more often than GOGC's 100 % without freeing more, back to back once the
// live heap passes it. In the torture (14 busy tenants) aiod's live heap
// passed 128 MiB and its GC took a quarter of its CPU: 0.76 cores against
// 0.31 with the limit kept above twice the live heap, and a well-behaved
// tenant's call 29-36 ms against 4.7 at p50 (bench/README.md, "the soft
// limit"). Buffers are the exception: the GC marks a buffer without
// reading it, so doubling them buys nothing, while four executions that
// print floods hold one --output-budget each, which doubled took aiod's
// RSS past +120 MiB. The eighth keeps the GC from running back to back
// when buffers grow between two reads (12 bash sessions printing at once
// hold 200 MiB of them).
func softLimit(base, held, buffers, live int64) int64 {
	buffers = min(buffers, live)
	return max(base, held+heldHeadroom, buffers+buffers/8+2*(live-buffers)+heldHeadroom)
}

// followHeld keeps the soft memory limit at softLimit, read every
// followEvery until ctx ends.
func followHeld(ctx context.Context, base int64, held func() (held, buffers int64)) {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	last := base
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(live)
		var l int64
		if live[0].Value.Kind() == metrics.KindUint64 {
			l = int64(live[0].Value.Uint64())
		}
		h, b := held()
		limit := softLimit(base, h, b, l)
		if limit != last {
			debug.SetMemoryLimit(limit)
			last = limit
		}
	}
}
