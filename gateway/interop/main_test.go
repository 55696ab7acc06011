// Package interop holds the tests in which Jupyter's own clients use a live
// gateway: Jupyter Server as a gateway client (--gateway-url) and
// @jupyterlab/services with both kernel WebSocket framings. They are a
// package of their own so that go test ./... runs them beside gateway's
// tests.
package interop

import (
	"os"
	"testing"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// TestMain fails the run if a test leaves a goroutine or a child process.
func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }
