package sandbox

import (
	"sync"
	"time"
)

// A tenant aiod holds costs it a network namespace, an egress proxy (its
// listener and goroutine) and, while the file plane is used, a helper
// process; with many callers (JWT subjects) they add up. ReleaseIdle lets
// go of tenants nobody has asked for in a while and that run nothing: the
// tenant's folders and uid stay (its files, its saved sessions), and its
// next call makes the sandbox anew, as after a restart.

// ReleaseIdle starts letting go of the tenants whose last Get is idle or
// more ago, whose file helper is not running, and that busy does not hold
// (it reports runtimes, pools or terminals of the tenant; it is called
// with the registry's lock held and must not call Tenants). Close stops
// it. Zero idle, or a second call, does nothing.
func (ts *Tenants) ReleaseIdle(idle time.Duration, busy func(*Tenant) bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if idle <= 0 || ts.idleStop != nil || ts.closed {
		return
	}
	ts.idleStop, ts.idleDone = make(chan struct{}), make(chan struct{})
	every := min(max(idle/4, 100*time.Millisecond), time.Minute)
	go func(stop, done chan struct{}) {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				ts.releaseIdle(now, idle, busy)
			}
		}
	}(ts.idleStop, ts.idleDone)
}

// stopReleasing ends ReleaseIdle's janitor and waits for it.
func (ts *Tenants) stopReleasing() {
	ts.mu.Lock()
	stop, done := ts.idleStop, ts.idleDone
	ts.idleStop = nil
	ts.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// BeforeRelease sets f, called with the key of each tenant about to be
// let go after idling, before it is (the tenant's shutdown hooks run
// there; they may use the tenant's sandbox). A tenant still idle after f
// returned is let go: nothing held or running in it, no file helper, no
// use since f returned. nil calls nothing.
func (ts *Tenants) BeforeRelease(f func(key string)) {
	ts.mu.Lock()
	ts.beforeRelease = f
	ts.mu.Unlock()
}

// releaseIdle lets go of the tenants idle at now.
func (ts *Tenants) releaseIdle(now time.Time, idle time.Duration, busy func(*Tenant) bool) {
	ts.mu.Lock()
	var idleOnes, call []*Tenant
	for _, t := range ts.byKey {
		if t.holds > 0 || t.files != nil && t.files.running() || busy(t) {
			continue
		}
		// Called for already and not used since: what that call started
		// (pools of the tenant) may have kept it, but it is not called
		// for again.
		called := !t.hooked.IsZero() && !t.used.After(t.hooked)
		if !called && now.Sub(t.used) < idle {
			continue
		}
		idleOnes = append(idleOnes, t)
		if !called {
			call = append(call, t)
		}
	}
	before := ts.beforeRelease
	ts.mu.Unlock()
	if len(idleOnes) == 0 {
		return
	}
	// Uses of a tenant while before runs are its own (a hook's one-shot):
	// only a use after it keeps the tenant.
	if before != nil && len(call) > 0 {
		var wg sync.WaitGroup
		for _, t := range call {
			wg.Go(func() { before(t.Key) })
		}
		wg.Wait()
		settled := time.Now()
		ts.mu.Lock()
		for _, t := range call {
			t.hooked = settled
		}
		ts.mu.Unlock()
	}
	type let struct {
		t *Tenant
		f *Files
	}
	var gone []let
	ts.mu.Lock()
	for _, t := range idleOnes {
		quiet := !t.used.After(t.hooked) || before == nil && now.Sub(t.used) >= idle
		if ts.byKey[t.Key] != t || t.holds > 0 || !quiet || t.files != nil && t.files.running() || busy(t) {
			continue
		}
		delete(ts.byKey, t.Key)
		t.released.Store(true)
		gone = append(gone, let{t, t.files})
	}
	ts.mu.Unlock()
	var wg sync.WaitGroup
	for _, g := range gone {
		wg.Go(func() {
			if g.f != nil {
				g.f.Close()
			}
			g.t.release()
			ts.log.Info("tenant released after idling", "tenant", g.t.Key, "uid", g.t.UID, "idle", idle)
		})
	}
	wg.Wait()
}

// Released says whether t was let go after idling: a start must get the
// tenant's sandbox anew (Get) instead of using t's closed namespace.
func (t *Tenant) Released() bool { return t.released.Load() }

// Use holds t for a start about to run in it: t is not let go until done
// is called (the start's runtime then holds its cgroup, which the busy
// check sees), and its idle time counts from then. When t was let go
// already, the tenant's sandbox is made anew by Get and held instead.
func (ts *Tenants) Use(t *Tenant) (held *Tenant, done func(), err error) {
	for {
		ts.mu.Lock()
		if !t.Released() {
			t.holds++
			ts.mu.Unlock()
			return t, func() {
				ts.mu.Lock()
				t.holds--
				t.used = time.Now()
				ts.mu.Unlock()
			}, nil
		}
		ts.mu.Unlock()
		if t, err = ts.Get(t.Key); err != nil {
			return nil, nil, err
		}
	}
}
