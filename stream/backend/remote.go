package backend

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/remote"
	"github.com/aiod/aiod/stream"
)

// RemoteInfo is what discovery routes say of AIO_JUPYTER_ENDPOINT.
type RemoteInfo struct {
	Endpoint    string              `json:"endpoint"`
	Reachable   bool                `json:"reachable"`
	Version     string              `json:"version,omitempty"`
	KernelSpecs []remote.KernelSpec `json:"kernelspecs"`
	Kernel      string              `json:"kernel"` // the kernelspec Python runs in
	Error       string              `json:"error,omitempty"`
	CheckedAt   time.Time           `json:"checked_at"`
}

// remoteBackend probes a Jupyter server at start and on a period, and
// starts Python kernels there while it answers.
type remoteBackend struct {
	client   *remote.Client
	kernel   string
	env      map[string]string // KERNEL_* variables passed to every start
	start    time.Duration
	interval time.Duration

	mu   sync.Mutex
	info RemoteInfo

	cancel context.CancelFunc
	done   chan struct{}
}

func newRemoteBackend(cfg Config) (*remoteBackend, error) {
	c, err := remote.NewClient(cfg.JupyterEndpoint, cfg.JupyterToken)
	if err != nil {
		return nil, fmt.Errorf("AIO_JUPYTER_ENDPOINT: %w", err)
	}
	r := &remoteBackend{client: c, kernel: cfg.JupyterKernel, env: kernelEnv(os.Environ()),
		start: cfg.JupyterStartTimeout, interval: cfg.JupyterProbeInterval, done: make(chan struct{})}
	if r.interval <= 0 {
		r.interval = 30 * time.Second
	}
	r.info = RemoteInfo{Endpoint: c.Endpoint(), KernelSpecs: []remote.KernelSpec{}}
	var ctx context.Context
	ctx, r.cancel = context.WithCancel(context.Background())
	r.probe(ctx)
	go r.loop(ctx)
	return r, nil
}

// kernelEnv picks the KERNEL_* variables (KERNEL_USERNAME, ...) that
// Enterprise Gateway reads from a kernel start request.
func kernelEnv(environ []string) map[string]string {
	out := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "KERNEL_") {
			out[k] = v
		}
	}
	return out
}

func (r *remoteBackend) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.probe(ctx)
		}
	}
}

// probe asks the server for its version and kernelspecs (bounded by the
// client's probe timeout) and records whether it answered.
func (r *remoteBackend) probe(ctx context.Context) {
	si, err := r.client.Probe(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.info.CheckedAt = time.Now().UTC()
	if err != nil {
		r.info.Reachable, r.info.Error = false, err.Error()
		return
	}
	r.info.Reachable, r.info.Error, r.info.Version = true, "", si.Version
	r.info.KernelSpecs = append([]remote.KernelSpec{}, si.KernelSpecs...)
	r.info.Kernel = r.kernel
	if r.info.Kernel == "" {
		r.info.Kernel = si.DefaultKernel
	}
}

// markDown records that a start or a running kernel found the server gone,
// so that new calls fall back at once instead of at the next probe.
func (r *remoteBackend) markDown(err error) {
	r.mu.Lock()
	r.info.Reachable, r.info.Error = false, err.Error()
	r.mu.Unlock()
}

// Info is the latest probe's view of the server.
func (r *remoteBackend) Info() RemoteInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.info
	i.KernelSpecs = append([]remote.KernelSpec{}, i.KernelSpecs...)
	return i
}

func (r *remoteBackend) reachable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info.Reachable
}

func (r *remoteBackend) close() {
	r.cancel()
	<-r.done
	r.client.CloseIdleConnections()
}

// remoteBackend starts kernels on the remote server; when it has become
// unreachable since the session was made, the session's next runtime comes
// from fallback instead, as the backend order says. remote.Start's errors
// already say "start remote kernel NAME on ENDPOINT: ...".
func (rt *Runtimes) remoteBackend(fallback stream.Backend) stream.Backend {
	r := rt.remote
	return stream.Backend{
		Name: Remote, Language: Python, Idle: rt.cfg.KernelIdle,
		Start: func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
			if !r.reachable() && fallback.Start != nil {
				return fallback.Start(ctx, h)
			}
			k, err := remote.Start(ctx, remote.Options{
				Client: r.client, KernelName: r.Info().Kernel, Handler: h, Env: r.env,
				StartTimeout: r.start, Logger: rt.log, Counter: rt.cfg.Counter,
			})
			if err != nil {
				r.markDown(err)
				return nil, err
			}
			return k, nil
		},
	}
}
