package kernel

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The package's tests must leave no goroutine of theirs (or of zmq4, or of
// os/exec) behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaks := waitNoLeaks(10 * time.Second); leaks != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaks)
			code = 1
		}
	}
	os.Exit(code)
}

// waitNoLeaks polls until no suspect goroutine remains, or returns their
// stacks after timeout.
func waitNoLeaks(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		leaks := suspectGoroutines()
		if leaks == "" || time.Now().After(deadline) {
			return leaks
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func suspectGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for i, g := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 { // this goroutine
			continue
		}
		s := string(g)
		if strings.Contains(s, "go-zeromq/zmq4") || strings.Contains(s, "aiod/aiod/kernel.") ||
			strings.Contains(s, "os/exec.") {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n\n")
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
