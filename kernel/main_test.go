package kernel

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// The package's tests must leave no goroutine of theirs (or of zmq4, or of
// os/exec) behind.
func TestMain(m *testing.M) {
	code := m.Run()
	closeSharedTemplates()
	if code == 0 {
		if leaks := kerneltest.Goroutines(10*time.Second, "go-zeromq/zmq4", "aiod/aiod/kernel.", "os/exec."); leaks != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaks)
			code = 1
		}
	}
	os.Exit(code)
}

// testLogger logs to stderr when AIOD_TEST_LOG is set, else nowhere.
func testLogger() *slog.Logger {
	if os.Getenv("AIOD_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Compile-time check that *Kernel is a stream.Runtime (stream imports this
// package, so the interface is spelled out here).
var _ interface {
	Execute(context.Context, ExecuteRequest) error
	Interrupt(context.Context) error
	Close(context.Context) error
	Done() <-chan struct{}
	Err() error
	Info() RuntimeInfo
} = (*Kernel)(nil)
