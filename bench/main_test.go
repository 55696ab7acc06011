package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aiod/aiod/bench/compare"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// daemonBin is the aiod binary the benchmarks drive, built once.
var daemonBin string

// TestMain builds aiod, runs the benchmarks, and fails the run if one left
// a goroutine or a child process.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aiod-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	daemonBin, err = compare.BuildDaemon(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := kerneltest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}
