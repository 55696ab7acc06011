package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Tenant uids without --tenant-uids: each state directory claims a block
// of its own the first time it serves tenants, records it in its
// tenant-uids file and keeps it across restarts. Blocks are AutoBlock uids
// from AutoFirstUID up; a block is free when no live daemon holds an
// overlapping range (the locks in uidLocks), no other state directory
// reserved one (uidReservations, kept across reboots, while that folder
// still records it), and no account of /etc/passwd has a uid in it. A
// second daemon on its own state directory therefore gets the next block
// and isolates its tenants as the first does, instead of giving up.
const (
	AutoFirstUID = 2_000_000_000
	AutoBlock    = 1_000_000
	// autoBlocks keeps the last block under 2^31-1, which some tools
	// take as the largest uid.
	autoBlocks = 147
)

// uidReservations holds one file per range a state directory claimed,
// named FIRST-LAST and holding that directory's path: beside the default
// state directory (/var/lib/aiod), not in it, as every daemon of the
// machine reads and writes it. Root's only.
var uidReservations = "/var/lib/aiod-tenant-uids"

// uidRecordName is the file in the state directory naming its range.
const uidRecordName = "tenant-uids"

// passwdFile is read for the accounts a block must not cover.
var passwdFile = "/etc/passwd"

// readRecord is the range the state directory dir records; ok is false
// when it records none.
func readRecord(dir string) (first, last uint32, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, uidRecordName))
	if err != nil {
		return 0, 0, false
	}
	return parseRange(strings.TrimSpace(string(b)))
}

func parseRange(s string) (uint32, uint32, bool) {
	a, b, ok := strings.Cut(s, "-")
	x, err1 := strconv.ParseUint(a, 10, 32)
	y, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil || x == 0 || y < x {
		return 0, 0, false
	}
	return uint32(x), uint32(y), true
}

// recordRange writes first-last as the state directory's range and as a
// reservation of it.
func recordRange(dir string, first, last uint32) error {
	name := fmt.Sprintf("%d-%d", first, last)
	if err := os.WriteFile(filepath.Join(dir, uidRecordName), []byte(name+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the tenant uids in the state directory: %w", err)
	}
	if err := os.MkdirAll(uidReservations, 0o700); err != nil {
		return fmt.Errorf("reserve the tenant uids: %w", err)
	}
	if err := os.WriteFile(filepath.Join(uidReservations, name), []byte(dir+"\n"), 0o600); err != nil {
		return fmt.Errorf("reserve the tenant uids: %w", err)
	}
	return nil
}

// legacyBlock is the block of the uids an older aiod gave the tenants of
// state directory dir before ranges were recorded; ok is false when it
// has none.
func legacyBlock(dir string) (first, last uint32, ok bool) {
	ents, _ := os.ReadDir(filepath.Join(dir, "tenants"))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, "tenants", e.Name(), "uid"))
		if err != nil {
			continue
		}
		u, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if err != nil || u < AutoFirstUID || u >= AutoFirstUID+autoBlocks*AutoBlock {
			continue
		}
		first = uint32(AutoFirstUID + (u-AutoFirstUID)/AutoBlock*AutoBlock)
		return first, first + AutoBlock - 1, true
	}
	return 0, 0, false
}

// reservedByOther reports which other state directory reserved a range
// overlapping first-last and still records it; "" when none.
func reservedByOther(dir string, first, last uint32) string {
	ents, _ := os.ReadDir(uidReservations)
	for _, e := range ents {
		a, b, ok := parseRange(e.Name())
		if !ok || b < first || a > last {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(uidReservations, e.Name()))
		if err != nil {
			continue
		}
		other := strings.TrimSpace(string(raw))
		if other == "" || other == dir {
			continue
		}
		if x, y, ok := readRecord(other); ok && x == a && y == b {
			return other
		}
	}
	return ""
}

// accountIn is the name of an /etc/passwd account whose uid is in
// first-last; "" when none.
func accountIn(first, last uint32) string {
	b, err := os.ReadFile(passwdFile)
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		if u, err := strconv.ParseUint(f[2], 10, 32); err == nil && uint32(u) >= first && uint32(u) <= last {
			return f[0]
		}
	}
	return ""
}

// autoRange is the range state directory dir uses without --tenant-uids:
// the one it records, the block its tenants' uids come from, or the first
// free block. held says whether a live daemon holds a range overlapping
// first-last. It claims nothing.
func autoRange(dir string, held func(first, last uint32) string) (first, last uint32, err error) {
	if a, b, ok := readRecord(dir); ok {
		return a, b, nil
	}
	if a, b, ok := legacyBlock(dir); ok {
		return a, b, nil
	}
	for i := range uint32(autoBlocks) {
		a := AutoFirstUID + i*AutoBlock
		b := a + AutoBlock - 1
		if held(a, b) != "" || reservedByOther(dir, a, b) != "" || accountIn(a, b) != "" {
			continue
		}
		return a, b, nil
	}
	return 0, 0, fmt.Errorf("no free block of tenant uids from %d in %d blocks of %d: give --tenant-uids", AutoFirstUID, autoBlocks, AutoBlock)
}

// AutoUIDs is the range state directory dir would use without
// --tenant-uids, without claiming it (the claim is NewTenants'): for a
// probe before the claim, and for reports.
func AutoUIDs(dir string) (first, last uint32, err error) {
	dir, err = filepath.Abs(dir)
	if err != nil {
		return 0, 0, err
	}
	return autoRange(dir, heldBy)
}
