package jupyter

import "context"

type launchedKey struct{}

// WithLaunched returns ctx carrying f, which the start of a runtime under
// ctx calls (through Launched) once its process, pid, runs: what remains
// of the start is the runtime's own (imports, a profile's startup files,
// NODE_OPTIONS), which the caller may watch (a start slot is held while
// it keeps a CPU busy). f may be called more than once: a start that is
// tried again launches another process.
func WithLaunched(ctx context.Context, f func(pid int)) context.Context {
	return context.WithValue(ctx, launchedKey{}, f)
}

// Launched tells ctx's WithLaunched that the runtime's process pid runs.
func Launched(ctx context.Context, pid int) {
	if f, ok := ctx.Value(launchedKey{}).(func(int)); ok {
		f(pid)
	}
}
