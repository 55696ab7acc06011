package backend

import (
	"strings"
	"testing"

	"github.com/aiod/aiod/stream/backend/isolate"
)

// startPools returns the templates' error (New validates the start mode
// first, so only a caller that skipped it can see one) before it starts
// anything.
func TestStartPoolsReturnsTemplatesError(t *testing.T) {
	iso, err := isolate.New(isolate.Config{Isolation: isolate.ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	defer iso.Close()
	r := &Runtimes{cfg: Config{KernelStart: "bogus", KernelPrewarm: 1, CodePrewarm: 1}, iso: iso, env: &Environment{}}
	if err := r.startPools(); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Fatalf("startPools with a bad start mode: %v", err)
	}
	if r.pools.templates != nil || r.pools.kernel != nil || r.pools.native != nil {
		t.Fatalf("startPools failed but left %+v", r.pools)
	}
}
