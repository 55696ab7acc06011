package jupyter

import (
	"regexp"
	"strconv"
	"testing"
	"time"
)

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-([0-9a-f])[0-9a-f]{3}-([89ab])[0-9a-f]{3}-[0-9a-f]{12}$`)

// TestIDs: NewID is a version 4 UUID, NewTimeID a version 7 one whose first
// 48 bits are the time in milliseconds, so ids made later sort later; both
// are distinct at every call.
func TestIDs(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for i := range 1000 {
		for _, c := range []struct {
			id      string
			version string
		}{{NewID(), "4"}, {NewTimeID(), "7"}} {
			m := uuidPattern.FindStringSubmatch(c.id)
			if m == nil || m[1] != c.version {
				t.Fatalf("%q: not a version %s UUID", c.id, c.version)
			}
			if seen[c.id] {
				t.Fatalf("%q made twice", c.id)
			}
			seen[c.id] = true
		}
		before := time.Now().UnixMilli()
		id := NewTimeID()
		after := time.Now().UnixMilli()
		ms, err := strconv.ParseInt(id[0:8]+id[9:13], 16, 64)
		if err != nil || ms < before || ms > after {
			t.Fatalf("%q: time %d ms, want %d..%d", id, ms, before, after)
		}
		if i > 0 && id[:13] < prev[:13] {
			t.Fatalf("%q made after %q sorts before it", id, prev)
		}
		prev = id
	}
}
