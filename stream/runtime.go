package stream

import (
	"context"

	"github.com/aiod/aiod/kernel"
)

// Runtime is what runs code: a Jupyter kernel (kernel.Kernel) or a native
// REPL process (replbridge.REPL). Output never comes back from Execute; it
// arrives as Jupyter messages through the kernel.Handler the runtime was
// started with, each parented to the request's MsgID:
//
//	iopub status busy, iopub stream / execute_result / display_data /
//	error / clear_output / update_display_data ..., iopub status idle,
//	shell execute_reply.
//
// All methods are safe for concurrent use.
type Runtime interface {
	// Execute sends one execute request and returns once it is sent.
	Execute(ctx context.Context, req kernel.ExecuteRequest) error
	// Interrupt asks the runtime to stop the running code and keep its state.
	Interrupt(ctx context.Context) error
	// Close shuts the runtime down (politely, then by signal), waits for its
	// process and goroutines, and is idempotent. After Close, Done is closed.
	Close(ctx context.Context) error
	// Done is closed when the runtime has died or been closed.
	Done() <-chan struct{}
	// Err says why Done was closed (nil while running, and after a clean Close
	// it is ErrClosed from the runtime's package).
	Err() error
	// Info describes the runtime.
	Info() kernel.RuntimeInfo
}
