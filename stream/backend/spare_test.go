package backend

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
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
