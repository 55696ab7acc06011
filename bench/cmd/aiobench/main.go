// Command aiobench measures aiod.
//
//	aiobench load [flags]     drive a running aiod and report latency and throughput
//	aiobench compare [flags]  start aiod, its floor and Jupyter Server, and compare them in one run
//	aiobench soak [flags]     start aiod, load it, let everything expire, and check its heap comes back
//	aiobench persist [flags]  snapshots, restores, SIGTERM with live sessions, saved sessions, RSS under load
//	aiobench torture [flags]  many tenants on every surface, two hostile: does aiod hold and come back?
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aiod/aiod/bench/load"
	"github.com/aiod/aiod/cmd/aiod/sysmon"
	"github.com/goccy/go-json"
)

func main() {
	// The floor (package kernel in this process) and the load generator
	// run with Go's monitor thread kept awake, as aiod does: the
	// comparison is of the gateway, not of a runtime setting.
	sysmon.KeepAwake()
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "load":
		err = runLoad(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "compare":
		err = runCompare(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "soak":
		err = runSoak(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "persist":
		err = runPersist(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "torture":
		err = runTorture(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "cluster":
		err = runCluster(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "-h", "--help", "help":
		usage(os.Stdout)
		return
	default:
		usage(os.Stderr)
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "aiobench:", err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  aiobench load [flags]     drive a running aiod over REST or WebSocket
  aiobench compare [flags]  floor vs aiod REST/WS vs Jupyter Server, one-shots, memory; one table and --json
  aiobench soak [flags]     mixed load, then everything expires: does aiod's live heap come back?
  aiobench persist [flags]  session snapshots and restores, SIGTERM with live sessions, 5,000 saved sessions, RSS under a steady load
  aiobench torture [flags]  16 tenants on every surface for 10 minutes, 2 of them hostile: a measured tenant's latency, failures, levels after, SIGTERM
  aiobench cluster [flags]  two replicas over NATS JetStream: a call through the tenant's home against the same call forwarded to it

Run "aiobench load -h", "aiobench compare -h", "aiobench soak -h", "aiobench persist -h", "aiobench torture -h" or "aiobench cluster -h" for flags.
`)
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg load.Config
	fs.StringVar(&cfg.URL, "url", "http://127.0.0.1:18091", "aiod base URL")
	fs.StringVar(&cfg.Mode, "mode", "rest", "rest or ws")
	fs.StringVar(&cfg.Language, "language", "python", "python or javascript")
	fs.StringVar(&cfg.Code, "code", "", "code to run (default: nothing but the check line); a line printing a per-call token is appended and checked")
	fs.IntVar(&cfg.Concurrency, "c", 1, "concurrent workers (each with its own connection)")
	fs.BoolVar(&cfg.Sessions, "sessions", true, "each worker uses its own named session (false: one-shot calls)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to run (ignored with -n)")
	fs.IntVar(&cfg.Count, "n", 0, "number of calls in all (0: run for -duration)")
	fs.Float64Var(&cfg.Timeout, "timeout", 60, "execution timeout sent with each call, seconds")
	fs.StringVar(&cfg.Token, "token", os.Getenv("AIO_TOKEN"), "API token (default $AIO_TOKEN)")
	fs.IntVar(&cfg.Warmup, "warmup", 2, "uncounted calls per worker first")
	fs.StringVar(&cfg.SessionPrefix, "session-prefix", "", "name the sessions PREFIX-0, PREFIX-1, … (default: a prefix of its own per run); a second run with the same prefix reuses the sessions")
	jsonOut := fs.String("json", "", "write the report as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		cfg.Progress = stderr
	}
	r, err := load.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s c=%d sessions=%v: %d calls, %d errors in %.1fs = %.1f exec/s\n",
		r.Mode, r.Language, r.Concurrency, r.Sessions, r.Calls, r.Errors, r.Seconds, r.PerSecond)
	fmt.Fprintf(stdout, "latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", r.P50, r.P90, r.P99, r.Max)
	for k, n := range r.ErrorKinds {
		fmt.Fprintf(stdout, "errors %s: %d\n", k, n)
	}
	for _, e := range r.Examples {
		fmt.Fprintf(stdout, "  %s\n", e)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if r.Errors > 0 {
		return fmt.Errorf("%d calls failed", r.Errors)
	}
	return nil
}

// writeJSON writes v, indented, to path and says so on stdout; an empty
// path writes nothing.
func writeJSON(stdout io.Writer, path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "wrote", path)
	return nil
}
