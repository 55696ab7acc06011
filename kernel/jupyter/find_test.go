package jupyter

import (
	"context"
	"testing"
)

// stubRuntime is a Runtime that does nothing, for the wrapper walk.
type stubRuntime struct{ name string }

func (stubRuntime) Execute(context.Context, ExecuteRequest) error { return nil }
func (stubRuntime) Interrupt(context.Context) error               { return nil }
func (stubRuntime) Close(context.Context) error                   { return nil }
func (stubRuntime) Done() <-chan struct{}                         { return nil }
func (stubRuntime) Err() error                                    { return nil }
func (s stubRuntime) Info() RuntimeInfo                           { return RuntimeInfo{Name: s.name} }

// counted is a Runtime with one more method, the kind Find looks for.
type counted struct{ stubRuntime }

func (counted) Received() uint64 { return 7 }

// wrapper wraps a Runtime as the resource limits' wrapper does.
type wrapper struct{ Runtime }

func (w wrapper) Unwrap() Runtime { return w.Runtime }

func TestFindThroughWrappers(t *testing.T) {
	type receiver interface{ Received() uint64 }
	inner := counted{stubRuntime{"inner"}}
	if r, ok := Find[receiver](wrapper{wrapper{inner}}); !ok || r.Received() != 7 {
		t.Fatalf("Find through two wrappers: %v %v", r, ok)
	}
	if _, ok := Find[receiver](wrapper{stubRuntime{"plain"}}); ok {
		t.Fatal("Find found a method the runtime lacks")
	}
	if _, ok := Find[receiver](nil); ok {
		t.Fatal("Find in nil")
	}
	// The outermost match wins: a wrapper may override what it wraps.
	if w, ok := Find[interface{ Unwrap() Runtime }](wrapper{inner}); !ok || w.Unwrap() != Runtime(inner) {
		t.Fatalf("Find of the wrapper itself: %v %v", w, ok)
	}
}
