package remote

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// DropConnection closes the kernel's channels socket abruptly (no close
// frame), as a network failure would, and reports whether one was open.
// The kernel reconnects with the same session id; its dials fail until
// outage has passed (the kernel's Client must come from client()).
func (k *Kernel) DropConnection(outage time.Duration) bool {
	if outage > 0 {
		ot, ok := k.client.hc.Transport.(*outageTransport)
		if !ok {
			panic("DropConnection: the kernel's Client was not made by client()")
		}
		ot.until.Store(time.Now().Add(outage).UnixNano())
	}
	k.cmu.Lock()
	c := k.cur
	k.cmu.Unlock()
	if c == nil {
		return false
	}
	c.CloseNow()
	return true
}

// outageTransport refuses channels socket handshakes until a time, as a
// network outage would; REST calls go through.
type outageTransport struct {
	next  http.RoundTripper
	until atomic.Int64 // unix ns
}

func (o *outageTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/channels") && time.Now().UnixNano() < o.until.Load() {
		return nil, errors.New("test outage: connection refused")
	}
	return o.next.RoundTrip(r)
}

func (o *outageTransport) CloseIdleConnections() {
	if c, ok := o.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// EndOutage lets the kernel's next dial through.
func (k *Kernel) EndOutage() {
	k.client.hc.Transport.(*outageTransport).until.Store(0)
}
