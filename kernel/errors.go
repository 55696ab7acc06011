package kernel

import (
	"errors"
	"fmt"
	"syscall"
	"time"
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

// DeadError is what Err returns when a kernel died on its own: its process
// exited or was killed, or it stopped answering heartbeats (after which
// aiod kills its process group).
type DeadError struct {
	// Cause says how it died, in words, e.g. "killed by signal SIGKILL",
	// "exited with code 1" or "stopped answering heartbeats for 5s".
	Cause string
	// ExitCode is the process exit code, or -1 when it was killed by a
	// signal or the code is unknown.
	ExitCode int
	// Signal names the signal that killed the process ("SIGKILL"), or is
	// empty.
	Signal string
	// Output is the tail of what the kernel wrote to stdout and stderr,
	// often the Python traceback that explains the death. It is not part
	// of Error.
	Output string
}

// Error returns "kernel died: " followed by the cause.
func (e *DeadError) Error() string { return "kernel died: " + e.Cause }

// deadFromExit describes a process exit.
func deadFromExit(st syscall.WaitStatus, waitErr error) *DeadError {
	switch {
	case st.Signaled():
		name := signalName(st.Signal())
		return &DeadError{Cause: "killed by signal " + name, ExitCode: -1, Signal: name}
	case st.Exited():
		code := st.ExitStatus()
		return &DeadError{Cause: fmt.Sprintf("exited with code %d", code), ExitCode: code}
	case waitErr != nil:
		return &DeadError{Cause: "wait for process: " + waitErr.Error(), ExitCode: -1}
	}
	return &DeadError{Cause: "exited", ExitCode: -1}
}

// deadFromHeartbeat describes a kernel that stopped answering heartbeats.
func deadFromHeartbeat(silent time.Duration) *DeadError {
	return &DeadError{
		Cause:    fmt.Sprintf("stopped answering heartbeats for %s", silent.Round(100*time.Millisecond)),
		ExitCode: -1,
	}
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS:  "SIGBUS",
	syscall.SIGFPE:  "SIGFPE",
	syscall.SIGHUP:  "SIGHUP",
	syscall.SIGILL:  "SIGILL",
	syscall.SIGINT:  "SIGINT",
	syscall.SIGKILL: "SIGKILL",
	syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGSEGV: "SIGSEGV",
	syscall.SIGTERM: "SIGTERM",
	syscall.SIGUSR1: "SIGUSR1",
	syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGXCPU: "SIGXCPU",
}

// signalName returns the conventional name of s, such as "SIGKILL".
func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}
