package replbridge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// ErrNoInterpreter is wrapped by every error that means the interpreter for
// a language is not installed on this host (answer 503 to it).
var ErrNoInterpreter = errors.New("interpreter not found")

// probeTimeout bounds each version probe (node --version, python3 --version):
// a bound for an interpreter that hangs, not a speed (npm --version, a
// Node.js program, took over 5 s on a loaded machine and was killed).
const probeTimeout = 20 * time.Second

// systemPython is preferred over python3 on PATH: on Debian it is the one
// whose packages (and ipykernel) the host manages.
const systemPython = "/usr/bin/python3"

// FindNode looks up node on PATH and asks it for its version ("20.20.2",
// without the "v"). The error wraps ErrNoInterpreter and says how to get node.
func FindNode() (path, version string, err error) {
	if path, err = nodePath(); err != nil {
		return "", "", err
	}
	version, err = probeVersion(path, "--version")
	if err != nil {
		return "", "", err
	}
	return path, version, nil
}

// FindPython returns /usr/bin/python3 when it exists, else python3 on PATH,
// and its version ("3.11.2"). The native REPL needs only the standard
// library. The error wraps ErrNoInterpreter.
func FindPython() (path, version string, err error) {
	if path, err = pythonPath(); err != nil {
		return "", "", err
	}
	version, err = probeVersion(path, "--version")
	if err != nil {
		return "", "", err
	}
	return path, version, nil
}

// FindBash looks up bash on PATH and returns its version ("5.2.15"). The
// error wraps ErrNoInterpreter.
func FindBash() (path, version string, err error) {
	if path, err = bashPath(); err != nil {
		return "", "", err
	}
	version, err = probeVersion(path, "-c", "echo ${BASH_VERSION%%(*}")
	if err != nil {
		return "", "", err
	}
	return path, version, nil
}

// NodeVersion runs `node --version` under ctx (and at most probeTimeout).
func NodeVersion(ctx context.Context) (string, error) {
	path, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("find node: %w", ErrNoInterpreter)
	}
	return probeVersionCtx(ctx, path, "--version")
}

// NpmVersion runs `npm --version` under ctx (and at most probeTimeout).
func NpmVersion(ctx context.Context) (string, error) {
	path, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("find npm: %w", ErrNoInterpreter)
	}
	return probeVersionCtx(ctx, path, "--version")
}

// nodePath, pythonPath and bashPath find the interpreters without asking
// their versions: a REPL's start needs only the path (a probe at every
// start cost a process, and failed a start when the machine was too busy
// to read its output within the probe's WaitDelay).
func nodePath() (string, error) {
	path, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("javascript needs node on PATH; none found (install Node.js, e.g. apt-get install nodejs): %w", ErrNoInterpreter)
	}
	return path, nil
}

func pythonPath() (string, error) {
	if _, err := os.Stat(systemPython); err == nil {
		return systemPython, nil
	}
	path, err := exec.LookPath("python3")
	if err != nil {
		return "", fmt.Errorf("python needs python3 (%s or on PATH); none found (install it, e.g. apt-get install python3): %w", systemPython, ErrNoInterpreter)
	}
	return path, nil
}

func bashPath() (string, error) {
	path, err := exec.LookPath("bash")
	if err != nil {
		return "", fmt.Errorf("bash needs bash on PATH; none found (install it, e.g. apt-get install bash): %w", ErrNoInterpreter)
	}
	return path, nil
}

// findInterpreter resolves Options.Interpreter for lang.
func findInterpreter(lang, given string) (string, error) {
	if given != "" {
		path, err := exec.LookPath(given)
		if err != nil {
			return "", fmt.Errorf("find interpreter %q: %w: %w", given, err, ErrNoInterpreter)
		}
		return path, nil
	}
	switch lang {
	case LangJavaScript:
		return nodePath()
	case LangBash:
		return bashPath()
	}
	return pythonPath()
}

func probeVersion(path string, args ...string) (string, error) {
	return probeVersionCtx(context.Background(), path, args...)
}

// probeVersionCtx runs path args and returns the last word of its output
// with a leading "v" removed ("Python 3.11.2" -> "3.11.2", "v20.1.0" -> "20.1.0").
func probeVersionCtx(ctx context.Context, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = "/" // nothing of aiod's working folder on the probe's path
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("probe version of %s: %w", path, err)
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return "", fmt.Errorf("probe version of %s: empty output", path)
	}
	return strings.TrimPrefix(fields[len(fields)-1], "v"), nil
}
