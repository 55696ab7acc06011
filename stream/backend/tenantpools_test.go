package backend

import (
	"fmt"
	"testing"
	"time"
)

// TestTenantPoolsBounded: past maxTenantPools tenants with pools, those
// whose last start is oldest lose theirs; idle ones lose theirs anyway.
func TestTenantPoolsBounded(t *testing.T) {
	now := time.Now()
	tps := &tenantPools{byKey: map[string]*tenantPool{}}
	for i := range maxTenantPools + 3 {
		tps.byKey[fmt.Sprint("t", i)] = &tenantPool{last: now.Add(time.Duration(i-20) * time.Second)}
	}
	tps.byKey["idle"] = &tenantPool{last: now.Add(-2 * tenantPoolIdle)}
	tps.closeIdle(now)
	if len(tps.byKey) != maxTenantPools {
		t.Fatalf("%d tenants keep pools, want %d", len(tps.byKey), maxTenantPools)
	}
	for _, gone := range []string{"idle", "t0", "t1", "t2"} {
		if tps.byKey[gone] != nil {
			t.Errorf("tenant %s keeps its pools", gone)
		}
	}
	if tps.byKey[fmt.Sprint("t", maxTenantPools+2)] == nil {
		t.Errorf("the most recent tenant lost its pools")
	}
}

// TestDefaultKernelPrewarm: 2 with fork, fewer under a small cap, none
// with spawn.
func TestDefaultKernelPrewarm(t *testing.T) {
	for _, c := range []struct {
		start string
		cap   int
		want  int
	}{{"fork", 0, 2}, {"fork", 376, 2}, {"fork", 8, 1}, {"fork", 2, 0}, {"spawn", 376, 0}} {
		if MemTotal() < 2<<30 && c.want == 2 {
			c.want = 1
		}
		if got := DefaultKernelPrewarm(c.start, c.cap); got != c.want {
			t.Errorf("DefaultKernelPrewarm(%s, %d) = %d, want %d", c.start, c.cap, got, c.want)
		}
	}
}
