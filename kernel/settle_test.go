package kernel

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/aiod/aiod/kernel/proc"
)

// TestLaunchedOnceStartupSettles: a kernel's start tells its caller that
// the start slot can go (jupyter.Launched) while the kernel app is still in
// an IPython startup file that sleeps; with one that spins, only once the
// kernel has run for proc.StartSlotCPU or proc.StartSlotWall has passed.
// Either way the start then completes.
func TestLaunchedOnceStartupSettles(t *testing.T) {
	kerneltest.SkipShort(t, "a kernel")
	spec, err := DefaultPythonSpec()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, wait string
		busy       bool
	}{
		{"sleeping", "time.sleep(0.05)", false},
		{"spinning", "pass", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			startup := filepath.Join(dir, "ipython", "profile_default", "startup")
			if err := os.MkdirAll(startup, 0o755); err != nil {
				t.Fatal(err)
			}
			goFile, pidFile := filepath.Join(dir, "go"), filepath.Join(dir, "pid")
			code := fmt.Sprintf("import os, time\nopen(%q, 'w').write(str(os.getpid()))\nwhile not os.path.exists(%q):\n    %s\n", pidFile, goFile, tc.wait)
			if err := os.WriteFile(filepath.Join(startup, "00-wait.py"), []byte(code), 0o644); err != nil {
				t.Fatal(err)
			}
			// What the kernel had run when its start said the slot can go.
			type when struct {
				cpu   float64 // -1: not in its startup file yet
				after time.Duration
			}
			launched := make(chan when, 4)
			began := time.Now()
			ctx := jupyter.WithLaunched(context.Background(), func() {
				w := when{cpu: -1, after: time.Since(began)}
				if b, err := os.ReadFile(pidFile); err == nil {
					if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
						w.cpu = proc.CPUSeconds(pid)
					}
				}
				launched <- w
			})
			ctx, cancel := context.WithTimeout(ctx, startTimeout)
			defer cancel()
			type result struct {
				k   *Kernel
				err error
			}
			res := make(chan result, 1)
			go func() {
				k, err := Start(ctx, Options{Spec: spec, Handler: newRecorder().Handle, Logger: testLogger(),
					StartTimeout: startTimeout, Env: []string{"IPYTHONDIR=" + filepath.Join(dir, "ipython")}})
				res <- result{k, err}
			}()
			var w when // in the sleeping case, cpu may be -1: a start-up waiting on the disk sleeps too
			select {
			case w = <-launched:
			case r := <-res:
				if r.k != nil {
					r.k.Close(context.Background())
				}
				t.Fatalf("the start returned before it said the slot can go: %v", r.err)
			}
			t.Logf("the slot can go %v after the start began, the kernel having run %.2f s of CPU", w.after.Round(time.Millisecond), w.cpu)
			if tc.busy && w.cpu < proc.StartSlotCPU.Seconds()-0.05 && w.after < proc.StartSlotWall {
				t.Errorf("a spinning start-up gave the slot back after %.2f s of CPU and %v", w.cpu, w.after.Round(time.Millisecond))
			}
			if err := os.WriteFile(goFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r := <-res
			if r.err != nil {
				t.Fatal(r.err)
			}
			if err := r.k.Close(context.Background()); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
}
