package main

import (
	"fmt"
	"net"

	"github.com/coreos/go-systemd/v22/activation"
)

// listen returns the socket aiod serves on: the one a supervisor bound and
// passed (socket activation, as a systemd socket unit does: descriptor 3,
// LISTEN_FDS=1 and LISTEN_PID=aiod's pid; --addr is then not used), or a
// new one on addr. It runs before anything is started, so that no runtime
// inherits a passed descriptor, and the LISTEN_* variables are removed
// from aiod's environment. activated says which.
func listen(addr string) (ln net.Listener, activated bool, err error) {
	lns, _ := activation.Listeners() // never fails; a socket it cannot use is nil
	switch {
	case len(lns) == 1 && lns[0] != nil:
		return lns[0], true, nil
	case len(lns) > 0:
		for _, l := range lns {
			if l != nil {
				l.Close()
			}
		}
		return nil, false, &usageError{fmt.Sprintf("socket activation: aiod serves one stream socket; LISTEN_FDS passed %d descriptors", len(lns))}
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, false, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, false, nil
}
