package gateway

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/valyala/fasthttp"
	"github.com/vishvananda/netlink"

	"github.com/aiod/aiod/gateway/api"
)

// Runtimes must not drive aiod's own API with aiod's rights. Under tenant
// isolation with --runtime-network none they cannot reach its port at all
// (their network namespace has its own loopback only). Where they can (the
// host's network, or --isolation none with --runtime-user), every
// connection from this machine is looked up when accepted: the kernel's
// socket table (sock_diag, through github.com/vishvananda/netlink) names
// the uid owning the client's socket, and a connection owned by a runtime's
// uid is a runtime peer. Without credentials configured, a runtime peer is
// refused on every route; with them, it must present one like anyone else
// (the guard already insists), so a runtime uses the API only with a token
// it was given.

// peerListener notes the connections of runtime peers in peers, by their
// remote address, for as long as they are open (fasthttp may wrap the
// connections it accepts, so a handler finds them by address).
type peerListener struct {
	net.Listener
	isRuntime func(uid uint32) bool
	peers     *sync.Map // remote address -> uid
	// lookup names the uid owning a local client's socket
	// (socketOwner; a test gives another).
	lookup func(remote, local *net.TCPAddr) (uint32, error)
	log    func(msg string, args ...any)
}

// peerConn is a runtime's accepted connection; closing it forgets it.
type peerConn struct {
	net.Conn
	peers *sync.Map
	once  sync.Once
}

func (c *peerConn) Close() error {
	c.once.Do(func() { c.peers.Delete(c.RemoteAddr().String()) })
	return c.Conn.Close()
}

// Accept hands on the next connection, noting a runtime's. A local
// connection whose owner cannot be found (twice) is closed, not let
// through as no runtime's: the check fails closed.
func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return c, err
		}
		uid, local, err := l.peerUID(c)
		if err != nil {
			if l.log != nil {
				l.log("connection closed: its owner is unknown", "remote", c.RemoteAddr().String(), "err", err)
			}
			c.Close()
			continue
		}
		if local && l.isRuntime(uid) {
			l.peers.Store(c.RemoteAddr().String(), uid)
			return &peerConn{Conn: c, peers: l.peers}, nil
		}
		return c, nil
	}
}

// peerUID looks up the uid owning the client end of c, when the client is
// on this machine (a loopback address, or the very address c arrived on).
// A lookup that fails is asked once more; err says it failed again.
func (l *peerListener) peerUID(c net.Conn) (uid uint32, local bool, err error) {
	ra, ok1 := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, false, nil
	}
	rip, _ := netip.AddrFromSlice(ra.IP)
	lip, _ := netip.AddrFromSlice(la.IP)
	if !rip.Unmap().IsLoopback() && rip.Unmap() != lip.Unmap() {
		return 0, false, nil
	}
	lookup := l.lookup
	if lookup == nil {
		lookup = socketOwner
	}
	for range 2 {
		if uid, err = lookup(ra, la); err == nil {
			return uid, true, nil
		}
	}
	return 0, true, fmt.Errorf("look up the owner of %s: %w", ra, err)
}

// socketOwner is the uid owning the client's socket: its local end is our
// remote one.
func socketOwner(remote, local *net.TCPAddr) (uint32, error) {
	s, err := netlink.SocketGet(remote, local)
	if err != nil {
		return 0, err
	}
	return s.UID, nil
}

// runtimePeer reports whether the request came over a runtime's
// connection, and its uid.
func (s *Server) runtimePeer(ctx *fasthttp.RequestCtx) (bool, uint32) {
	if uid, ok := s.peers.Load(ctx.RemoteAddr().String()); ok {
		return true, uid.(uint32)
	}
	return false, 0
}

// refuseRuntimePeers answers 403 to a runtime's request when no
// credentials are configured (with them, the guard asks the runtime for
// one as for any caller).
func (s *Server) refuseRuntimePeers(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if rt, uid := s.runtimePeer(ctx); rt && !s.guard.AuthRequired() {
			s.log.Info("request refused", "status", 403, "method", string(ctx.Method()), "reason", "from a runtime", "uid", uid)
			api.Fail(ctx, fasthttp.StatusForbidden, fmt.Sprintf(
				"this request comes from one of aiod's runtimes (uid %d): runtimes may not drive aiod's API with aiod's rights; "+
					"set --token (AIO_TOKEN) and give the runtime a token if it must call aiod", uid))
			return
		}
		next(ctx)
	}
}
