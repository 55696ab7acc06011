package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"time"

	"github.com/aiod/aiod/bench/soak"
)

// runSoak runs a mixed load on a daemon it starts, lets everything
// expire, and says whether the live heap came back.
func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg soak.Config
	fs.DurationVar(&cfg.Duration, "duration", 3*time.Minute, "how long the mixed load runs")
	fs.DurationVar(&cfg.Retention, "retention", 30*time.Second, "the daemon's --execution-retention (the soak waits past it)")
	fs.DurationVar(&cfg.KillEvery, "kill-every", 20*time.Second, "a session's kernel is killed this often")
	fs.Float64Var(&cfg.MaxGrowthMiB, "max-growth", 8, "MiB the live heap may end above its start")
	jsonOut := fs.String("json", "", "write the result as JSON to this file")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*quiet {
		cfg.Log = stderr
	}
	res, err := soak.Run(ctx, cfg)
	if err != nil {
		return err
	}
	res.WriteTable(stdout)
	if err := writeJSON(stdout, *jsonOut, res); err != nil {
		return err
	}
	if !res.Returned {
		return errors.New("soak: the live heap did not come back after everything expired")
	}
	return nil
}
