package snapshot

import (
	"os"
	"testing"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// TestMain fails the run if a test leaves a goroutine or a child process.
func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }
