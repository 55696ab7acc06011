package call

import (
	"fmt"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/execution"
)

// Flags that bound the code calls hold in memory, named in refusals.
const (
	HeldTenantFlag = "--held-code-tenant"
	HeldTotalFlag  = "--held-code-total"
)

// held counts the code bytes of the calls admitted and not yet over, per
// tenant and in all: a call waits in its session's queue (or runs) with its
// code, and its request's body, in aiod's memory. A call past a bound is
// refused with 429 instead of waiting; a call alone is always let in (the
// body limit, --max-body, bounds it).
type held struct {
	perTenant, total int64 // 0: no bound

	mu       sync.Mutex
	byTenant map[string]int64 // guarded by mu
	all      int64            // guarded by mu
}

// take counts n bytes for tenant, or refuses when that would pass a bound.
func (h *held) take(tenant string, n int64) *Error {
	h.mu.Lock()
	defer h.mu.Unlock()
	mine := h.byTenant[tenant]
	var why string
	switch {
	case h.perTenant > 0 && mine > 0 && mine+n > h.perTenant:
		why = fmt.Sprintf("this caller's calls that wait or run already hold %s of code in memory, and this one's %s would pass the bound of %s (%s)",
			backend.FormatBytes(mine), backend.FormatBytes(n), backend.FormatBytes(h.perTenant), HeldTenantFlag)
	case h.total > 0 && h.all > 0 && h.all+n > h.total:
		why = fmt.Sprintf("the calls that wait or run already hold %s of code in memory, and this one's %s would pass the bound of %s for all callers (%s)",
			backend.FormatBytes(h.all), backend.FormatBytes(n), backend.FormatBytes(h.total), HeldTotalFlag)
	}
	if why != "" {
		return &Error{Status: fasthttp.StatusTooManyRequests, Msg: why + "; retry once some have finished", Kind: execution.KindAdmission, Retry: 1}
	}
	if h.byTenant == nil {
		h.byTenant = map[string]int64{}
	}
	h.byTenant[tenant] = mine + n
	h.all += n
	return nil
}

// give returns what take counted.
func (h *held) give(tenant string, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if left := h.byTenant[tenant] - n; left > 0 {
		h.byTenant[tenant] = left
	} else {
		delete(h.byTenant, tenant)
	}
	h.all -= n
}

// Held is what the calls admitted and not over hold, for tenant and in all.
func (c *Core) Held(tenant string) (mine, all int64) {
	c.held.mu.Lock()
	defer c.held.mu.Unlock()
	return c.held.byTenant[tenant], c.held.all
}
