package compare

import (
	"context"
	"fmt"
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
	return f, nil
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
