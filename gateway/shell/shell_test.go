package shell

import (
	"fmt"
	"strings"
	"testing"
)

// A bash session's commands hold the last 2 MiB of each output while they
// are its latest and the last 64 KiB once a later one has started: ten
// commands of 4 MB each hold about 2.6 MiB, not 40.
func TestCommandOutputsAreBounded(t *testing.T) {
	ss := &session{}
	chunk := strings.Repeat("x", 64<<10)
	for i := range 10 {
		c := newCommand(fmt.Sprint(i), "flood", "r", "t", false)
		ss.add(c)
		for range 64 { // 4 MiB
			c.out.write(chunk)
			c.errb.write(chunk)
		}
	}
	held := 0
	for i, id := range ss.order {
		c := ss.byID[id]
		n := cap(c.out.b) + cap(c.errb.b) + cap(c.all.b)
		held += n
		if i < len(ss.order)-1 && n > 4*keepOldBytes+8192 {
			t.Errorf("command %s, no longer the latest, holds %d bytes", id, n)
		}
		if text, end := c.out.from(0); end != 4<<20 || len(text) > keepBytes+keepBytes/2 || (i < len(ss.order)-1 && len(text) != keepOldBytes) {
			t.Errorf("command %s: %d bytes from offset 0, end %d", id, len(text), end)
		}
	}
	if held > 8<<20 {
		t.Fatalf("ten commands of 4 MB hold %d bytes", held)
	}
}
