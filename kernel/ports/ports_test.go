package ports

import (
	"net"
	"slices"
	"strconv"
	"testing"
)

// TestFreePortsAreDistinctAndBindable: each call's ports are distinct,
// below the ephemeral range, free to bind, and never handed out twice
// within the hold.
func TestFreePortsAreDistinctAndBindable(t *testing.T) {
	lo, hi := pickRange()
	first, err := Free(5)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Free(5)
	if err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(first), second...)
	for i, p := range all {
		if p < lo || p >= hi {
			t.Errorf("port %d outside %d-%d", p, lo, hi)
		}
		if slices.Contains(all[:i], p) {
			t.Errorf("port %d handed out twice: %v then %v", p, first, second)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}
