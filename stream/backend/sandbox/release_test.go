package sandbox

import (
	"testing"
	"time"
)

// TestReleaseIdle: a tenant held by a start (Use), or that busy reports,
// is kept however long idle; one neither is let go, keeping its uid, and
// Use of the released pointer gives the tenant made anew.
func TestReleaseIdle(t *testing.T) {
	ts, _ := newTenants(t, NetworkNone)
	alice, err := ts.Get("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := ts.Get("jwt:bob")
	if err != nil {
		t.Fatal(err)
	}
	held, done, err := ts.Use(alice)
	if err != nil || held != alice {
		t.Fatalf("Use of a live tenant: %v, %v", held, err)
	}
	later := time.Now().Add(time.Hour)
	busyBob := func(t *Tenant) bool { return t == bob }
	ts.releaseIdle(later, time.Minute, busyBob)
	if alice.Released() || bob.Released() || ts.Count() != 2 {
		t.Fatalf("released a held or busy tenant: alice %v bob %v, %d held", alice.Released(), bob.Released(), ts.Count())
	}
	done()
	ts.releaseIdle(time.Now().Add(time.Hour), time.Minute, busyBob)
	if !alice.Released() || bob.Released() || ts.Count() != 1 {
		t.Fatalf("after the start: alice released %v, bob %v, %d held", alice.Released(), bob.Released(), ts.Count())
	}
	again, done, err := ts.Use(alice)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if again == alice || again.Released() || again.UID != alice.UID || again.Dir != alice.Dir {
		t.Fatalf("Use of released alice: %p (uid %d, %s), was %p (uid %d, %s)", again, again.UID, again.Dir, alice, alice.UID, alice.Dir)
	}
	if ts.Count() != 2 {
		t.Errorf("%d tenants held after alice came back", ts.Count())
	}
}
