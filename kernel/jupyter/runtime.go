package jupyter

import (
	"context"
	"fmt"
	"sync"
	"syscall"
)

// Runtime is what runs code: a Jupyter kernel (package kernel), a kernel on
// a remote Jupyter server (package kernel/remote) or a native REPL process
// (package replbridge). Output never comes back from Execute; it arrives as
// messages through the Handler the runtime was started with, each parented
// to the request's MsgID:
//
//	iopub status busy, iopub stream / execute_result / display_data /
//	error / clear_output / update_display_data ..., iopub status idle,
//	shell execute_reply.
//
// All methods are safe for concurrent use.
type Runtime interface {
	// Execute sends one execute request and returns once it is sent.
	Execute(ctx context.Context, req ExecuteRequest) error
	// Interrupt asks the runtime to stop the running code and keep its state.
	Interrupt(ctx context.Context) error
	// Close shuts the runtime down (politely, then by signal), waits for its
	// process and goroutines, and is idempotent. After Close, Done is closed.
	Close(ctx context.Context) error
	// Done is closed when the runtime has died or been closed.
	Done() <-chan struct{}
	// Err says why Done was closed: nil while running, the runtime package's
	// ErrClosed after a clean Close, a *DeadError (or, for a remote kernel,
	// its own error) when it died.
	Err() error
	// Info describes the runtime.
	Info() RuntimeInfo
}

// DoneNotifier is a Runtime that calls back once its Done is closed: a
// thousand idle sessions need not park a thousand goroutines on Done.
type DoneNotifier interface {
	// AfterDone calls f on a goroutine of its own once Done is closed;
	// stop cancels that unless f was already started.
	AfterDone(f func()) (stop func() bool)
}

// Find returns the first T among rt and the runtimes it wraps (a wrapper
// has an Unwrap() Runtime method, as the resource limits' one does).
func Find[T any](rt Runtime) (T, bool) {
	for rt != nil {
		if v, ok := rt.(T); ok {
			return v, true
		}
		u, ok := rt.(interface{ Unwrap() Runtime })
		if !ok {
			break
		}
		rt = u.Unwrap()
	}
	var zero T
	return zero, false
}

// Sender is a Runtime that takes any client message as it is (a Jupyter
// kernel, local or remote), for Jupyter front ends attached to it.
type Sender interface {
	Send(ctx context.Context, m *Message) error
}

// RuntimeInfo describes a running runtime.
type RuntimeInfo struct {
	Backend  string // "kernel", "jupyter" or "native"
	Language string // "python" or "javascript"
	Name     string // kernelspec name for kernels, interpreter path for native
	PID      int
	Version  string // interpreter version, when known
}

// DeadError is what a runtime's Err returns when it died on its own: its
// process exited or was killed, or it stopped answering heartbeats.
type DeadError struct {
	// Runtime names what died, e.g. "kernel" or "python REPL".
	Runtime string
	// Cause says how it died, in words, e.g. "killed by signal SIGKILL",
	// "exited with code 1" or "stopped answering heartbeats for 5s".
	Cause string
	// ExitCode is the process exit code, or -1 when it was killed by a
	// signal or the code is unknown.
	ExitCode int
	// Signal names the signal that killed the process ("SIGKILL"), or is
	// empty.
	Signal string
	// Output is the tail of what the runtime wrote to stdout and stderr,
	// often the traceback that explains the death. It is not part of Error.
	Output string
	// Kind classifies the death when something measured it: DeathOutOfMemory
	// when the runtime's memory limit killed it (read from its cgroup's
	// counters, never guessed from SIGKILL); "" otherwise.
	Kind string
	// Limit says, in words, the limit that ended the runtime when Kind is
	// set, e.g. "512 MiB (--runtime-memory-limit)".
	Limit string
}

// DeathOutOfMemory is DeadError.Kind for a runtime killed by its memory
// limit.
const DeathOutOfMemory = "out_of_memory"

// Error returns "<runtime> died: <cause>".
func (e *DeadError) Error() string { return e.Runtime + " died: " + e.Cause }

// ExitError describes how a process ended, from its wait status (and the
// error of the wait, when the status says nothing).
func ExitError(runtime string, st syscall.WaitStatus, waitErr error) *DeadError {
	switch {
	case st.Signaled():
		name := SignalName(st.Signal())
		return &DeadError{Runtime: runtime, Cause: "killed by signal " + name, ExitCode: -1, Signal: name}
	case st.Exited():
		code := st.ExitStatus()
		return &DeadError{Runtime: runtime, Cause: fmt.Sprintf("exited with code %d", code), ExitCode: code}
	case waitErr != nil:
		return &DeadError{Runtime: runtime, Cause: "wait for process: " + waitErr.Error(), ExitCode: -1}
	}
	return &DeadError{Runtime: runtime, Cause: "exited", ExitCode: -1}
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

// SignalName returns the conventional name of s, such as "SIGKILL".
func SignalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

// Counter counts named events, each with one label (usually a reason):
// runtimes report what they dropped through it, and package stream keeps
// every such count in one place. Count must be safe for concurrent use and
// must not block.
type Counter interface {
	Count(name, label string, n int64)
}

// DroppedMessages is the counter under which runtimes count the messages
// they drop, labelled by why: bad_signature, malformed or duplicate.
const DroppedMessages = "kernel_dropped_messages"

// Discard is a Counter that counts nothing.
var Discard Counter = discard{}

type discard struct{}

func (discard) Count(string, string, int64) {}

// Replies routes the replies to a client's own requests (kernel_info,
// interrupt, shutdown) to the channels waiting for them, away from the
// Handler. The zero value is ready to use; it is safe for concurrent use.
type Replies struct {
	mu sync.Mutex
	m  map[string]chan *Message // msg_id -> waiter; nil once forgotten
}

// Expect routes the replies to msgID to ch. Delivery never blocks: ch must
// be buffered (a full ch drops the reply). A nil ch drops them.
func (r *Replies) Expect(msgID string, ch chan *Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]chan *Message{}
	}
	r.m[msgID] = ch
}

// Forget stops delivering to the channels given to Expect. Late replies to
// those requests are still kept from the Handler.
func (r *Replies) Forget(msgIDs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range msgIDs {
		if _, ok := r.m[id]; ok {
			r.m[id] = nil
		}
	}
}

// Route hands m to the channel expecting its parent and reports whether m
// answers one of the client's own requests; then the Handler must not see
// it.
func (r *Replies) Route(m *Message) bool {
	if m.Parent.MsgID == "" {
		return false
	}
	r.mu.Lock()
	ch, ok := r.m[m.Parent.MsgID]
	r.mu.Unlock()
	if ok && ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
	return ok
}

// Ended holds why a runtime ended: the first cause set, never cleared. The
// zero value is ready to use; it is safe for concurrent use.
type Ended struct {
	mu  sync.Mutex
	err error // guarded by mu
}

// Err is the cause set first, nil while there is none.
func (e *Ended) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Set records err unless a cause was set before.
func (e *Ended) Set(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = err
	}
}

// Request sends m, a client's own request, with send and returns its
// reply of replyType; r keeps the reply from the Handler. It ends early
// when ctx ends or ended is closed (endErr says why).
func Request(ctx context.Context, r *Replies, send func(context.Context, *Message) error, m *Message, replyType string,
	ended <-chan struct{}, endErr func() error) (*Message, error) {
	replies := make(chan *Message, 8)
	r.Expect(m.Header.MsgID, replies)
	defer r.Forget(m.Header.MsgID)
	if err := send(ctx, m); err != nil {
		return nil, err
	}
	return Await(ctx, replies, replyType, ended, endErr)
}
