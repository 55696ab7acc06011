package remote

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Sentinels callers branch on. The errors Err returns wrap one of them.
var (
	// ErrClosed is what Err returns after a Close of a kernel that was
	// still alive, and what sends return once the kernel has been closed.
	ErrClosed = errors.New("remote kernel: closed")

	// ErrGone is wrapped by *GoneError: the server no longer has the kernel
	// (culled, deleted behind aiod's back, or dead). The next call needs a
	// fresh kernel.
	ErrGone = errors.New("remote kernel: gone")

	// ErrUnreachable is wrapped by *UnreachableError: the Jupyter server
	// stopped answering.
	ErrUnreachable = errors.New("remote kernel: server unreachable")
)

// GoneError says that the server no longer runs the kernel: GET of its
// model answered 404 (or reported it dead), or the channels WebSocket was
// refused with 404.
type GoneError struct {
	KernelID string
	Endpoint string // the server, as given to NewClient (credentials redacted)
	// Reason is in words: "culled or deleted" or "the server reports it
	// dead".
	Reason string
}

// Error returns "remote kernel ID is gone from ENDPOINT (REASON)".
func (e *GoneError) Error() string {
	return fmt.Sprintf("remote kernel %s is gone from %s (%s)", e.KernelID, e.Endpoint, e.Reason)
}

// Is makes errors.Is(err, ErrGone) hold.
func (e *GoneError) Is(target error) bool { return target == ErrGone }

// UnreachableError says that the Jupyter server stopped answering: the
// channels WebSocket was lost and could not be opened again within
// Options.ReconnectTimeout.
type UnreachableError struct {
	KernelID string
	Endpoint string
	Attempts int   // reconnect attempts made
	Cause    error // the last failure
}

// Error names the endpoint, the kernel and the last failure.
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("jupyter server %s stopped answering: remote kernel %s lost its channels connection and %d reconnect attempts failed: %v",
		e.Endpoint, e.KernelID, e.Attempts, e.Cause)
}

// Is makes errors.Is(err, ErrUnreachable) hold.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// Unwrap returns the last failure.
func (e *UnreachableError) Unwrap() error { return e.Cause }

// HTTPError is a REST call the server answered with an unexpected status.
type HTTPError struct {
	Method  string
	Path    string // below the endpoint, e.g. "/api/kernels"
	Status  int
	Message string // the "message" of Jupyter's JSON error body, or the start of the body
}

// Error returns e.g. "POST /api/kernels: 500 Internal Server Error: No such
// kernel named julia", with a hint for 401 and 403.
func (e *HTTPError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden {
		s += " (check AIO_JUPYTER_TOKEN)"
	}
	return s
}

// statusOf returns the HTTP status of err when it is an *HTTPError, else 0.
func statusOf(err error) int {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

// redactedError hides a secret in an error's text and keeps its chain. The
// channels URL carries the token as ?token=, and net/http quotes URLs in
// its errors.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact returns err with every occurrence of secret replaced.
func redact(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(err.Error(), secret, "REDACTED"), err: err}
}
