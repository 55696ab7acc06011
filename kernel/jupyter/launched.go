package jupyter

import "context"

type launchedKey struct{}

// WithLaunched returns ctx carrying f, which the start of a runtime under
// ctx calls (through Launched) once the rest of the start no longer needs
// the caller's start slot: its process runs, and its own start-up
// (imports, a profile's startup files, NODE_OPTIONS) has stopped keeping
// a CPU busy or has run for long (kernel and replbridge watch it with
// proc.WhenSettled). f may be called more than once.
func WithLaunched(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, launchedKey{}, f)
}

// Launched tells ctx's WithLaunched that the rest of the start needs no
// start slot.
func Launched(ctx context.Context) {
	if f := LaunchedHook(ctx); f != nil {
		f()
	}
}

// LaunchedHook returns the f of ctx's WithLaunched, or nil when ctx
// carries none (the start holds no slot to give back).
func LaunchedHook(ctx context.Context) func() {
	f, _ := ctx.Value(launchedKey{}).(func())
	return f
}
