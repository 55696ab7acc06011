package kernel

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Sentinels callers branch on.
var (
	// ErrClosed is what Err returns after a Close of a kernel that was
	// still alive, and what sends return once the kernel has been closed.
	ErrClosed = errors.New("kernel: closed")

	// ErrNoSpec is wrapped by FindSpec and DefaultPythonSpec when no
	// kernelspec matches.
	ErrNoSpec = errors.New("kernel: no such kernelspec")
)

// A kernel that died on its own ends with a *jupyter.DeadError whose
// Runtime is "kernel": its Error reads "kernel died: CAUSE".
const deadRuntime = "kernel"

// deadFromExit describes a process exit.
func deadFromExit(st syscall.WaitStatus, waitErr error) *jupyter.DeadError {
	return jupyter.ExitError(deadRuntime, st, waitErr)
}

// deadFromSend describes a kernel cut because a message could not be
// written to one of its sockets.
func deadFromSend(channel string, err error) *jupyter.DeadError {
	return &jupyter.DeadError{
		Runtime:  deadRuntime,
		Cause:    fmt.Sprintf("writing to its %s socket failed (%v)", channel, err),
		ExitCode: -1,
	}
}

// deadFromHeartbeat describes a kernel that stopped answering heartbeats.
func deadFromHeartbeat(silent time.Duration) *jupyter.DeadError {
	return &jupyter.DeadError{
		Runtime:  deadRuntime,
		Cause:    fmt.Sprintf("stopped answering heartbeats for %s", silent.Round(100*time.Millisecond)),
		ExitCode: -1,
	}
}
