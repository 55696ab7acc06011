// Package gatewaytest starts a gateway for the tests of other packages
// (gateway/e2e, gateway/interop): on a loopback port it listens on itself,
// with a state directory and tenant uids of the test's own, stopped with
// every runtime when the test ends. Package gateway's own tests have a
// helper of their own that reaches its internals.
package gatewaytest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/aiod/aiod/gateway"
	"github.com/aiod/aiod/kernel/kerneltest"
)

// Server is a live gateway and its address.
type Server struct {
	*gateway.Server
	URL string // http://127.0.0.1:PORT
}

// Start starts a gateway with cfg and stops it when t ends. As in package
// gateway's tests, unset fields take the daemon's defaults (tenant
// isolation where the machine allows it), and the kernel templates import
// ipykernel alone (cfg.NoKernelWarmup; the kernels import pandas and
// matplotlib on first use).
func Start(t testing.TB, cfg gateway.Config) *Server {
	t.Helper()
	kerneltest.SkipShort(t, "a gateway with real runtimes")
	cfg.NoKernelWarmup = true
	if cfg.KernelStartTimeout == 0 {
		cfg.KernelStartTimeout = 120 * time.Second
	}
	if cfg.Isolation.StateDir == "" {
		cfg.Isolation.StateDir = t.TempDir()
	}
	if cfg.Isolation.FirstUID == 0 {
		cfg.Isolation.FirstUID, cfg.Isolation.LastUID = kerneltest.UIDRange(t)
	}
	srv, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
	})
	return &Server{Server: srv, URL: "http://" + ln.Addr().String()}
}
