package compare

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aiod/aiod/kernel"
	"github.com/aiod/aiod/kernel/jupyter"
)

// floorKernel is one ipykernel driven straight over zmq4 by package kernel.
type floorKernel struct {
	k *kernel.Kernel
	r *router
}

func startFloorKernel(ctx context.Context, run string, env []string) (*floorKernel, error) {
	spec, err := kernel.DefaultPythonSpec()
	if err != nil {
		return nil, err
	}
	f := &floorKernel{r: newRouter()}
	f.k, err = kernel.Start(ctx, kernel.Options{
		Spec: spec, StartTimeout: 3 * time.Minute, Env: append([]string{markerEnv + "=" + run}, env...),
		Handler: func(m *jupyter.Message) { f.r.on(m.Parent.MsgID, m.Header.MsgType, m.Content) },
	})
	if err != nil {
		return nil, fmt.Errorf("floor: start kernel: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := f.exec(pctx, floorPreload()); err != nil {
		_ = f.k.Close(ctx)
		return nil, fmt.Errorf("floor: preload: %w", err)
	}
	return f, nil
}

// floorPreload makes a floor kernel hold what aiod's kernels hold with the
// default --kernel-warmup: its template imports kernel.DefaultPreload,
// collects and freezes the garbage collector, and forks. A kernel with
// pandas and matplotlib loaded takes longer per cell than a bare one (about
// 0.1 ms on 5.3 ms here, bench/README.md), and the floor is the same kernel
// driven without aiod. A module that fails to import is skipped, as the
// template does; nothing is bound in the user's namespace.
func floorPreload() string {
	names := make([]string, len(kernel.DefaultPreload))
	for i, m := range kernel.DefaultPreload {
		names[i] = strconv.Quote(m)
	}
	return "def _aiobench_preload():\n" +
		"    import gc\n" +
		"    for m in (" + strings.Join(names, ", ") + ",):\n" +
		"        try:\n" +
		"            __import__(m)\n" +
		"        except Exception:\n" +
		"            pass\n" +
		"    gc.collect()\n" +
		"    gc.freeze()\n" +
		"_aiobench_preload()\n" +
		"del _aiobench_preload\n"
}

// exec sends an execute_request as aiod's sessions do (store_history on).
func (f *floorKernel) exec(ctx context.Context, code string) (string, error) {
	id := jupyter.NewID()
	p := f.r.add(id)
	if err := f.k.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		f.r.remove(id)
		return "", err
	}
	return f.r.wait(ctx, id, p)
}

func (f *floorKernel) close(ctx context.Context) error { return f.k.Close(ctx) }

// startFloor starts n kernels, at most par at a time.
func startFloor(ctx context.Context, run string, env []string, n, par int) ([]*floorKernel, error) {
	ks := make([]*floorKernel, n)
	errs := make([]error, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ks[i], errs[i] = startFloorKernel(ctx, run, env)
		}()
	}
	wg.Wait()
	var live []*floorKernel
	var first error
	for i, k := range ks {
		if k != nil {
			live = append(live, k)
		}
		if errs[i] != nil && first == nil {
			first = errs[i]
		}
	}
	return live, first
}
