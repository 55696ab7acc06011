package cluster

import (
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A connection to a replica is taken for lost within lostAfter when its
// peer goes silent without a reset (a machine gone): keepalive probes after
// 5 s, three of them 5 s apart, and unacknowledged data given lostAfter.
func TestDialFindsALostReplica(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		level, opt, value int
	}{
		"SO_KEEPALIVE":     {unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		"TCP_KEEPIDLE":     {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 5},
		"TCP_KEEPINTVL":    {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 5},
		"TCP_KEEPCNT":      {unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 3},
		"TCP_USER_TIMEOUT": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(lostAfter.Milliseconds())},
	}
	for name, w := range want {
		var got int
		var gerr error
		if err := rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), w.level, w.opt) }); err != nil || gerr != nil {
			t.Fatalf("%s: %v %v", name, err, gerr)
		}
		if got != w.value {
			t.Errorf("%s = %d, want %d", name, got, w.value)
		}
	}
	if lostAfter.Seconds() > 30 {
		t.Errorf("lostAfter %v: a call forwarded to a lost home must be answered within a minute", lostAfter)
	}
}
