package remote

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

	"github.com/aiod/aiod/kernel"
)

// The package's tests must leave no goroutine of theirs (or of
// coder/websocket) behind.
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
		if strings.Contains(s, "aiod/aiod/kernel/remote.") || strings.Contains(s, "coder/websocket") ||
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

// Compile-time check that *Kernel is a stream.Runtime (spelled out: stream
// is being edited elsewhere, and this package must not depend on it).
var _ interface {
	Execute(context.Context, kernel.ExecuteRequest) error
	Interrupt(context.Context) error
	Close(context.Context) error
	Done() <-chan struct{}
	Err() error
	Info() kernel.RuntimeInfo
} = (*Kernel)(nil)
