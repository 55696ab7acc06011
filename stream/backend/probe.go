package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/aiod/aiod/kernel"
)

// specVersion is what probeSpec learns about a Python kernelspec's interpreter.
type specVersion struct {
	Python    string // e.g. "3.11.2"
	IPyKernel string // e.g. "6.17.0"
}

// probeScript prints the interpreter and ipykernel versions on one line.
const probeScript = `import sys, ipykernel; print(sys.version.split()[0], ipykernel.__version__)`

// probeTimeout bounds probeSpec when ctx has no earlier deadline.
const probeTimeout = 15 * time.Second

// probeSpec runs the spec's interpreter (argv[0]) to report its Python and
// ipykernel versions. It is meant for Python ipykernel specs; for others it
// fails. It gives up at ctx's deadline or after probeTimeout.
func probeSpec(ctx context.Context, s *kernel.Spec) (specVersion, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
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
		// The last line of a Python traceback is its exception.
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if msg := strings.TrimSpace(lines[len(lines)-1]); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return specVersion{}, fmt.Errorf("probe kernelspec %s (%s): %w", s.Name, s.Argv[0], err)
	}
	f := strings.Fields(stdout.String())
	if len(f) != 2 {
		return specVersion{}, fmt.Errorf("probe kernelspec %s (%s): unexpected output %q",
			s.Name, s.Argv[0], stdout.String())
	}
	return specVersion{Python: f[0], IPyKernel: f[1]}, nil
}
