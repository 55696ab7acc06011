//go:build !linux

package gateway

import "net"

// quickAckListener is the listener itself: TCP_QUICKACK exists on Linux
// only (see quickack_linux.go).
type quickAckListener struct{ net.Listener }
