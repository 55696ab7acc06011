package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// tempUIDPlaces points the uid locks, the reservations and the accounts
// file at folders of the test's own.
func tempUIDPlaces(t *testing.T) {
	locks, reservations, passwd := uidLocks, uidReservations, passwdFile
	uidLocks, uidReservations = t.TempDir(), t.TempDir()
	passwdFile = filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(passwdFile, []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uidLocks, uidReservations, passwdFile = locks, reservations, passwd })
}

// Two daemons claiming overlapping uid ranges at the same moment: exactly
// one gets them, every time (each used to check for the other, find
// nothing, then lock its own range).
func TestUIDClaimsAtOnce(t *testing.T) {
	tempUIDPlaces(t)
	for round := range 50 {
		var wg sync.WaitGroup
		releases := make([]func(), 2)
		for i, r := range [][2]uint32{{1000, 1999}, {1500, 2499}} {
			dir := t.TempDir()
			wg.Go(func() {
				if _, _, release, err := claimUIDs(dir, r[0], r[1]); err == nil {
					releases[i] = release
				}
			})
		}
		wg.Wait()
		got := 0
		for _, release := range releases {
			if release != nil {
				got++
				release()
			}
		}
		if got != 1 {
			t.Fatalf("round %d: %d of two overlapping claims succeeded, want 1", round, got)
		}
	}
}

// Without --tenant-uids each state directory claims a block of its own:
// the first free one, kept across restarts, never one another state
// directory holds or still records, never one with an account in it.
func TestAutoUIDsPerStateDir(t *testing.T) {
	tempUIDPlaces(t)
	block := func(i uint32) string {
		return fmt.Sprintf("%d-%d", AutoFirstUID+i*AutoBlock, AutoFirstUID+(i+1)*AutoBlock-1)
	}
	claim := func(dir string) (string, func()) {
		t.Helper()
		first, last, release, err := claimUIDs(dir, 0, 0)
		if err != nil {
			t.Fatalf("claim for %s: %v", dir, err)
		}
		if rec, _ := os.ReadFile(filepath.Join(dir, uidRecordName)); strings.TrimSpace(string(rec)) != fmt.Sprintf("%d-%d", first, last) {
			t.Fatalf("%s records %q, claimed %d-%d", dir, rec, first, last)
		}
		return fmt.Sprintf("%d-%d", first, last), release
	}
	a, b := t.TempDir(), t.TempDir()

	// Two daemons at once: the second takes the next block.
	ra, releaseA := claim(a)
	rb, releaseB := claim(b)
	if ra != block(0) || rb != block(1) {
		t.Fatalf("a claimed %s and b %s, want %s and %s", ra, rb, block(0), block(1))
	}
	releaseA()
	releaseB()

	// b restarts alone: it keeps its block, though block 0 is free now.
	if rb2, release := claim(b); rb2 != block(1) {
		t.Fatalf("b claimed %s after a restart, want its %s", rb2, block(1))
	} else {
		release()
	}

	// A new state directory while neither runs: a's and b's blocks are
	// reserved; an account with a uid in block 2 takes that one too.
	if err := os.WriteFile(passwdFile, []byte("root:x:0:0::/:/bin/sh\nsvc:x:2002000007:100::/:/bin/false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := t.TempDir()
	if rc, release := claim(c); rc != block(3) {
		t.Fatalf("c claimed %s, want %s (0 and 1 reserved, 2 has an account)", rc, block(3))
	} else {
		release()
	}

	// a's folder is gone: its reservation no longer counts.
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	if rd, release := claim(t.TempDir()); rd != block(0) {
		t.Fatalf("d claimed %s, want %s (a's folder is gone)", rd, block(0))
	} else {
		release()
	}

	// A state directory an older aiod used keeps the block its tenants'
	// uids come from.
	old := t.TempDir()
	if err := os.MkdirAll(filepath.Join(old, "tenants", "jwt_x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "tenants", "jwt_x", "uid"), []byte("2005000042\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ro, release := claim(old); ro != block(5) {
		t.Fatalf("the older state directory claimed %s, want %s", ro, block(5))
	} else {
		release()
	}
}

// A state directory whose recorded block a live daemon holds (given that
// range by hand) is refused, naming both, rather than given another block
// its tenants' uids are not in.
func TestAutoUIDsRecordedButHeld(t *testing.T) {
	tempUIDPlaces(t)
	dir := t.TempDir()
	first, last, release, err := claimUIDs(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	release()
	_, _, hold, err := claimUIDs(t.TempDir(), first+10, first+20)
	if err != nil {
		t.Fatal(err)
	}
	defer hold()
	_, _, _, err = claimUIDs(dir, 0, 0)
	want := fmt.Sprintf("already hands out tenant uids %d-%d, which overlap the tenant uids %d-%d that state directory %s records", first+10, first+20, first, last, dir)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("claim of a held recorded block: %v, want %q", err, want)
	}
}
