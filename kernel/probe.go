package kernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// SpecVersion is what Probe learns about a Python kernelspec's interpreter.
type SpecVersion struct {
	Python    string // e.g. "3.11.2"
	IPyKernel string // e.g. "6.17.0"
}

// probeScript prints the interpreter and ipykernel versions on one line.
const probeScript = `import sys, ipykernel; print(sys.version.split()[0], ipykernel.__version__)`

// DefaultProbeTimeout bounds Probe when ctx has no earlier deadline.
const DefaultProbeTimeout = 15 * time.Second

// Probe runs the spec's interpreter (argv[0]) to report its Python and
// ipykernel versions. It is meant for Python ipykernel specs; for others it
// fails. It gives up at ctx's deadline or after DefaultProbeTimeout.
func (s *Spec) Probe(ctx context.Context) (SpecVersion, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Argv[0], "-c", probeScript)
	// In /: "python -c" puts its working folder first on the path, and
	// aiod (root) would import an ipykernel.py planted in its own.
	cmd.Dir = "/"
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	if err != nil {
		if msg := lastLine(stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return SpecVersion{}, fmt.Errorf("probe kernelspec %s (%s): %w", s.Name, s.Argv[0], err)
	}
	f := strings.Fields(stdout.String())
	if len(f) != 2 {
		return SpecVersion{}, fmt.Errorf("probe kernelspec %s (%s): unexpected output %q",
			s.Name, s.Argv[0], stdout.String())
	}
	return SpecVersion{Python: f[0], IPyKernel: f[1]}, nil
}

// lastLine returns the last non-empty line of s, which for a Python
// traceback is the exception.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
