// Package e2e holds the browser tests of the notebook page and the API's
// docs page: headless Chromium, driven by web/e2e (playwright-core),
// against a live gateway. They are a package of their own so that go test
// ./... runs them beside gateway's tests.
package e2e

import (
	"os"
	"testing"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// TestMain fails the run if a test leaves a goroutine or a child process.
func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }
