package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/aiod/aiod/bench/compare"
)

// runCompare starts the floor, aiod and Jupyter Server on loopback, measures
// them in one run, prints one table and writes the JSON and the SVG chart.
func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "fewer kernels and calls: under 60 s on 2 cores (every shortcut is labelled in the output)")
	jsonOut := fs.String("json", "", "write the numbers as JSON to this file")
	svgOut := fs.String("svg", "", "write the latency chart (SVG) to this file (default: next to --json, .svg)")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	startOnly := fs.Bool("start-only", false, "run only the kernel start benchmark (fork against spawn)")
	noStart := fs.Bool("no-start", false, "skip the kernel start benchmark")
	withStart := fs.Bool("start", false, "with --quick: run the kernel start benchmark too (quick mode skips it, to stay under a minute)")
	startMax := fs.Int("start-max", 0, "most live sessions the start benchmark's staircase opens (default 1000, quick 100)")
	startBurst := fs.Int("start-burst", 0, "sessions of the start benchmark's burst (default 64, quick 16)")
	restoreSizes := fs.String("restore-sizes", "0,100000", "rows of the DataFrames of the snapshot and restore phase (empty skips it; quick mode skips it unless set)")
	restoreRounds := fs.Int("restore-rounds", 5, "restarts the snapshot and restore phase times a restore over")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("compare: unexpected arguments %q", fs.Args())
	}
	if *svgOut == "" && *jsonOut != "" && !*startOnly { // the chart is of the main comparison
		*svgOut = strings.TrimSuffix(*jsonOut, filepath.Ext(*jsonOut)) + ".svg"
	}
	if *quick && !*withStart && !*startOnly {
		*noStart = true
	}
	cfg := compare.Config{Quick: *quick, StartOnly: *startOnly, NoStart: *noStart, StartMax: *startMax, StartBurst: *startBurst, RestoreRounds: *restoreRounds}
	restoreSet := false
	fs.Visit(func(f *flag.Flag) { restoreSet = restoreSet || f.Name == "restore-sizes" })
	if !*quick || restoreSet {
		rows, err := parseRows("--restore-sizes", *restoreSizes)
		if err != nil {
			return fmt.Errorf("compare: %w", err)
		}
		cfg.RestoreRows = rows
	}
	if !*quiet {
		cfg.Log = stderr
	}
	res, runErr := compare.Run(ctx, cfg)
	if res == nil {
		return runErr
	}
	if runErr != nil {
		fmt.Fprintln(stdout, "the run stopped early:", runErr)
		return runErr
	}
	res.WriteTable(stdout)
	if err := writeJSON(stdout, *jsonOut, res); err != nil {
		return err
	}
	if *svgOut != "" {
		f, err := os.Create(*svgOut)
		if err != nil {
			return err
		}
		if err := res.WriteSVG(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "wrote", *svgOut)
	}
	if len(res.Failures) > 0 {
		return errors.New("compare: some paths failed (see FAILED above); their numbers are null in the JSON")
	}
	return nil
}
