package backend

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aiod/aiod/stream/backend/sandbox"
)

// TestWorkdirProblemOnlyForTheHostsFolder: a start that failed without a
// tenant, in a working folder missing on the host, blames the folder; a
// tenant's start is left as it failed (its folder is its own, in its view:
// the CI log once blamed a host folder for a kernel template's timeout).
func TestWorkdirProblemOnlyForTheHostsFolder(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "gone")
	cause := errors.New("start kernel python3: not ready within 1m0s")
	if err := workdirProblem(gone, nil, cause); !errors.Is(err, cause) || !strings.Contains(err.Error(), "(--workdir) is unusable") {
		t.Errorf("without a tenant: %v", err)
	}
	if err := workdirProblem(gone, &sandbox.Tenant{Key: "alice"}, cause); err != cause {
		t.Errorf("a tenant's start: %v, want the start's own error", err)
	}
}
