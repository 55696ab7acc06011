//go:build !linux

package remote

import (
	"context"
	"net"
)

// quickAckDial dials TCP; TCP_QUICKACK exists on Linux only (see
// quickack_linux.go).
func quickAckDial(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.DialContext
}
