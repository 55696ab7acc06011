package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/bench/persist"
)

// runPersist measures sessions and executions that outlive their process
// (issue 28); see bench/README.md.
func runPersist(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("persist", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg persist.Config
	fs.IntVar(&cfg.Saved, "saved", 5000, "saved sessions made for the scale figure")
	fs.IntVar(&cfg.Live, "live", 20, "live sessions one SIGTERM saves")
	fs.DurationVar(&cfg.LoadDuration, "load", 2*time.Minute, "steady load at the default retention (0 skips it)")
	fs.IntVar(&cfg.LoadConcurrency, "c", 4, "workers of the steady load")
	sizes := fs.String("sizes", "0,10000,100000,1000000", "rows of the DataFrames whose snapshot and restore are timed by size (empty skips them)")
	fs.IntVar(&cfg.SizeRounds, "size-rounds", 3, "restarts the by-size restores are timed over")
	jsonOut := fs.String("json", "", "write the report as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rows, err := parseRows("--sizes", *sizes)
	if err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	cfg.SizeRows = rows
	cfg.Progress = stdout
	r, err := persist.Run(ctx, cfg)
	if r != nil && *jsonOut != "" {
		b, _ := json.MarshalIndent(r, "", "  ")
		if werr := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); werr != nil {
			return werr
		}
	}
	if err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	return nil
}

// parseRows reads a comma-separated list of row counts (flag is its name,
// for the error); an empty list is none.
func parseRows(flag, list string) ([]int, error) {
	var rows []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s: %q is not a number of rows", flag, f)
		}
		rows = append(rows, n)
	}
	return rows, nil
}
