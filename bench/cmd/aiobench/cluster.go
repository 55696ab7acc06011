package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/bench/cluster"
)

// runCluster measures what forwarding to a tenant's home adds to a call
// (issue 41); see bench/README.md.
func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg cluster.Config
	fs.IntVar(&cfg.Rounds, "n", 300, "calls each way")
	jsonOut := fs.String("json", "", "write the report as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Progress = stdout
	r, err := cluster.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(r, "", "  ")
		return os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}
