package jupyter

import "context"

type launchedKey struct{}

// WithLaunched returns ctx carrying f, which the start of a runtime under
// ctx calls (through Launched) once its process runs: what remains of the
// start is the runtime's own (imports, a profile's startup files,
// NODE_OPTIONS), which a start slot need not wait for. f may be called
// more than once.
func WithLaunched(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, launchedKey{}, f)
}

// Launched tells ctx's WithLaunched that the runtime's process runs.
func Launched(ctx context.Context) {
	if f, ok := ctx.Value(launchedKey{}).(func()); ok {
		f()
	}
}
