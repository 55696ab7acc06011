// Package ports picks free loopback TCP ports for a kernel's sockets.
package ports

import (
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// recent holds the ports handed out in the last hold: between
// Free closing its listener and the kernel binding the port, a kernel
// started concurrently could otherwise be given the same port.
var recent = struct {
	sync.Mutex
	at map[int]time.Time
}{at: map[int]time.Time{}}

const hold = time.Minute

// Free returns n distinct free TCP ports on 127.0.0.1, none handed
// out by this process in the last minute. All listeners stay open until
// every port is picked so that none is picked twice.
//
// Ports are picked below the kernel's ephemeral range: a port from bind(0)
// is in that range, and between our pick and the kernel's bind the OS may
// hand it to any outgoing connection (ours to other kernels included) as
// its source port. Ports below the range are never handed out that way.
func Free(n int) ([]int, error) {
	recent.Lock()
	defer recent.Unlock()
	now := time.Now()
	for p, t := range recent.at {
		if now.Sub(t) > hold {
			delete(recent.at, p)
		}
	}
	lo, hi := pickRange()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 50*n {
			return nil, fmt.Errorf("pick free port: none free in %d-%d after %d tries", lo, hi, tries)
		}
		p := lo + mrand.IntN(hi-lo)
		if _, taken := recent.at[p]; taken || slices.Contains(ports, p) {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use
		}
		defer l.Close()
		ports = append(ports, p)
	}
	for _, p := range ports {
		recent.at[p] = now
	}
	return ports, nil
}

// pickRange is where kernel ports are picked: the 12,000 ports below the
// ephemeral range (/proc/sys/net/ipv4/ip_local_port_range, 32768 when
// unreadable), and never below 1024.
func pickRange() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				hi = v
			}
		}
	}
	return max(1024, hi-12000), hi
}
