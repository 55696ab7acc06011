package kernel

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// TestMain closes the templates the tests shared, then fails the run if a
// test leaves a goroutine or a child process.
func TestMain(m *testing.M) {
	os.Exit(kerneltest.Run(m, closeSharedTemplates))
}

// testLogger logs to stderr when AIOD_TEST_LOG is set, else nowhere.
func testLogger() *slog.Logger {
	if os.Getenv("AIOD_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Compile-time check that *Kernel is a jupyter.Runtime (stream imports this
// package, so the interface is spelled out here).
var _ interface {
	Execute(context.Context, jupyter.ExecuteRequest) error
	Interrupt(context.Context) error
	Close(context.Context) error
	Done() <-chan struct{}
	Err() error
	Info() jupyter.RuntimeInfo
} = (*Kernel)(nil)
