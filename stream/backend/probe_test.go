package backend

import (
	"context"
	"strings"
	"testing"

	"github.com/aiod/aiod/kernel"
)

// TestProbeSpec probes the system kernelspec of the test machine
// (python3-ipykernel on Debian), and one whose interpreter fails.
func TestProbeSpec(t *testing.T) {
	t.Parallel()
	spec, err := kernel.DefaultPythonSpec()
	if err != nil {
		t.Fatal(err)
	}
	if !spec.IsIPyKernel() {
		t.Errorf("default python spec %s is not ipykernel: %q", spec.Dir, spec.Argv)
	}
	v, err := probeSpec(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.Python, "3.") || v.IPyKernel == "" {
		t.Errorf("probe = %+v", v)
	}
	bad := &kernel.Spec{Name: "bad", Argv: []string{"/bin/false"}}
	if _, err := probeSpec(context.Background(), bad); err == nil || !strings.HasPrefix(err.Error(), "probe kernelspec bad (/bin/false): ") {
		t.Errorf("probe of /bin/false: %v", err)
	}
}
