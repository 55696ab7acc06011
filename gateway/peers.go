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

func (l *peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if uid, local := peerUID(c); local && l.isRuntime(uid) {
		l.peers.Store(c.RemoteAddr().String(), uid)
		return &peerConn{Conn: c, peers: l.peers}, nil
	}
	return c, nil
}

// peerUID looks up the uid owning the client end of c, when the client is
// on this machine (a loopback address, or the very address c arrived on).
func peerUID(c net.Conn) (uid uint32, local bool) {
	ra, ok1 := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, false
	}
	rip, _ := netip.AddrFromSlice(ra.IP)
	lip, _ := netip.AddrFromSlice(la.IP)
	if !rip.Unmap().IsLoopback() && rip.Unmap() != lip.Unmap() {
		return 0, false
	}
	// The client's socket: its local end is our remote one.
	s, err := netlink.SocketGet(ra, la)
	if err != nil {
		return 0, false // it closed already: no request follows
	}
	return s.UID, true
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
