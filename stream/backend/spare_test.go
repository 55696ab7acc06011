package backend

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

// waitReady waits until r's pools (every tenant's and the spare's) hold n
// ready kernels.
func waitReady(t *testing.T, r *Runtimes, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for r.PoolStats("")["kernel"].Ready != n {
		if time.Now().After(deadline) {
			t.Fatalf("pools: %+v, want %d kernels ready", r.PoolStats("")["kernel"], n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSpareTenantPools: with KeepSpare, new tenants arriving at once each
// get a sandbox of their own; the one that adopts the spare takes a kernel
// pooled in it, running as its uid; the next spare fills, and the next new
// tenant takes from it.
func TestSpareTenantPools(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, _ := newTenantRuntimes(t, ctx, Config{CodeBackend: Kernel, KernelPrewarm: 1})
	r.KeepSpare()
	waitReady(t, r, 1)

	// Three at once: one adopts the spare, the others make sandboxes.
	var wg sync.WaitGroup
	uids := map[uint32]string{}
	var mu sync.Mutex
	for _, name := range []string{"jwt:a", "jwt:b", "jwt:c"} {
		wg.Go(func() {
			tn, err := r.TenantSandbox(name)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, ok := uids[tn.UID]; ok {
				t.Errorf("%s and %s share uid %d", name, other, tn.UID)
			}
			uids[tn.UID] = name
		})
	}
	wg.Wait()
	adopter := ""
	for _, name := range []string{"jwt:a", "jwt:b", "jwt:c"} {
		if st := r.PoolStats(name)["kernel"]; st.Ready == 1 {
			adopter = name
		}
	}
	if adopter == "" {
		t.Fatalf("no tenant holds the spare's pool: %+v", r.PoolStats(""))
	}
	tn, _ := r.TenantSandbox(adopter)
	if out := runIn(t, ctx, r, Want{Language: Python, Tenant: adopter}, "import os; print(os.getuid(), os.getcwd())"); out != fmt.Sprintf("%d %s\n", tn.UID, r.Workdir()) {
		t.Errorf("%s's first kernel: %q, want uid %d in %s", adopter, out, tn.UID, r.Workdir())
	}
	if st := r.PoolStats(adopter)["kernel"]; st.Taken != 1 || st.Misses != 0 {
		t.Errorf("%s's pool: %+v, want its first kernel taken from it", adopter, st)
	}

	// The next spare: the adopter's refill and the new spare's kernel.
	waitReady(t, r, 2)
	d, _ := r.TenantSandbox("jwt:d")
	if _, taken := uids[d.UID]; taken {
		t.Errorf("jwt:d got uid %d, taken already", d.UID)
	}
	if out := runIn(t, ctx, r, Want{Language: Python, Tenant: "jwt:d"}, "import os; print(os.getuid())"); out != fmt.Sprintf("%d\n", d.UID) {
		t.Errorf("jwt:d's first kernel: %q, want uid %d", out, d.UID)
	}
	if st := r.PoolStats("jwt:d")["kernel"]; st.Taken != 1 || st.Misses != 0 {
		t.Errorf("jwt:d's pool: %+v", st)
	}
}

// BenchmarkNewTenantFirstExecute times a new tenant's first execute, one
// tenant per iteration, with the default pool size (2) and every pool full
// before each tenant comes: from asking for the tenant's runtime (its
// sandbox made or adopted, its runtime started or taken) to the idle
// after print(1)'s output; the runtime's close is not timed. "cold" is
// without a spare (each tenant's pools made at its first start, which is
// cold), "spare" with one. Run it with -benchtime 12x; it reports p50 and
// p90 in ms, and how many first runtimes came from a pool.
func BenchmarkNewTenantFirstExecute(b *testing.B) {
	for _, mode := range []string{"cold", "spare"} {
		b.Run(mode, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			r, _ := newTenantRuntimes(b, ctx, Config{CodeBackend: Kernel, KernelPrewarm: 2})
			if mode == "spare" {
				r.KeepSpare()
			}
			templateReady(b, ctx, r)
			var lats []float64
			pooled := 0
			for i := 0; b.Loop(); i++ {
				full(b, r, mode == "spare")
				tenant := fmt.Sprintf("jwt:%s-%d", mode, i)
				lats = append(lats, firstExecute(b, ctx, r, tenant))
				pooled += int(r.PoolStats(tenant)["kernel"].Taken)
			}
			b.Logf("%s, in order: %v", mode, lats)
			slices.Sort(lats)
			b.ReportMetric(lats[len(lats)/2], "p50_ms")
			b.ReportMetric(lats[len(lats)*9/10], "p90_ms")
			b.ReportMetric(float64(pooled), "pooled")
		})
	}
}

// firstExecute runs print(1) in a new runtime of tenant and returns the
// ms from asking for it to the idle after the output.
func firstExecute(tb testing.TB, ctx context.Context, r *Runtimes, tenant string) float64 {
	tb.Helper()
	start := time.Now()
	b, err := r.For(Want{Language: Python, Tenant: tenant})
	if err != nil {
		tb.Fatal(err)
	}
	id := jupyter.NewID()
	done := make(chan struct{})
	var out atomic.Bool
	rt, err := b.Start(ctx, func(m *jupyter.Message) {
		switch {
		case m.Parent.MsgID != id:
		case m.Header.MsgType == jupyter.MsgStream:
			out.Store(true)
		case m.Header.MsgType == jupyter.MsgStatus && jupyter.ExecutionState(m.Content) == jupyter.StateIdle:
			close(done)
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer rt.Close(context.Background())
	if err := rt.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: "print(1)"}); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		tb.Fatal("no idle")
	}
	took := float64(time.Since(start).Microseconds()) / 1000
	if !out.Load() {
		tb.Fatalf("%s: no output", tenant)
	}
	return took
}

// full waits until every pool is full, and with spare until the spare's
// pool is there and full too.
func full(b testing.TB, r *Runtimes, spare bool) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st := r.PoolStats("")["kernel"]
		r.tpools.mu.Lock()
		sp := r.tpools.spare
		r.tpools.mu.Unlock()
		if st.Ready == st.Size && (!spare || sp != nil && sp.kernel.Ready() == r.cfg.KernelPrewarm) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("pools never filled: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
