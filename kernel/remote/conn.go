package remote

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/aiod/aiod/kernel/jupyter"
)

const (
	// reconnectMin and reconnectMax bound the pause between two reconnect
	// attempts; it doubles from the first to the second.
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 2 * time.Second
	// minDial is the least time a reconnect attempt is given.
	minDial = time.Second
	// closeGrace bounds the polite close of the channels socket at the end.
	closeGrace = 2 * time.Second
)

// dial opens the channels WebSocket, offering SubprotocolV1; the server's
// choice decides the framing. The token goes both in the Authorization
// header and in ?token= (some proxies and older servers only read the
// latter); errors never show it. A 404 means the server no longer has the
// kernel (*GoneError); 401 and 403 give an *HTTPError.
func (k *Kernel) dial(ctx context.Context) (*websocket.Conn, framing, error) {
	h := http.Header{}
	k.client.authorize(h)
	q := url.Values{"session_id": {k.session}}
	if k.client.token != "" {
		q.Set("token", k.client.token)
	}
	path := kernelPath(k.model.ID, "/channels")
	u := k.client.url(path, true) + "?" + q.Encode()
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient:   k.client.hc,
		HTTPHeader:   h,
		Subprotocols: []string{SubprotocolV1},
	})
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // drop the quoted URL: it says nothing new
			err = ue.Err
		}
		err = redact(redact(err, k.client.token), url.QueryEscape(k.client.token))
		if resp != nil {
			switch resp.StatusCode {
			case http.StatusNotFound:
				return nil, 0, k.gone("culled or deleted")
			case http.StatusUnauthorized, http.StatusForbidden:
				return nil, 0, &HTTPError{Method: http.MethodGet, Path: path, Status: resp.StatusCode}
			}
		}
		return nil, 0, fmt.Errorf("open channels socket: %w", err)
	}
	c.SetReadLimit(k.opts.ReadLimit)
	if c.Subprotocol() == SubprotocolV1 {
		return c, v1Framing, nil
	}
	return c, legacyFraming, nil
}

func (k *Kernel) gone(reason string) *GoneError {
	return &GoneError{KernelID: k.model.ID, Endpoint: k.client.endpoint, Reason: reason}
}

// run owns the channels connection for the kernel's life: it serves one
// socket until it is lost, then reconnects with the same session id (the
// server then replays what it buffered meanwhile), until the end begins or
// reconnecting fails, which ends the kernel.
func (k *Kernel) run(c *websocket.Conn, f framing) {
	defer k.wg.Done()
	for {
		err := k.serve(c, f)
		if k.stopped() {
			return
		}
		k.log.Debug("channels socket lost", "err", err)
		if c, f, err = k.reconnect(err); err != nil {
			if !k.stopped() {
				k.log.Debug("channels socket not reopened", "err", err)
			}
			k.end(err, false)
			return
		}
		k.reconnects.Add(1)
		k.protocol.Store(int32(f))
		k.log.Debug("channels socket reopened", "protocol", f)
	}
}

// serve runs the reader, the writer and the pinger of one socket and
// returns why the socket was lost, once all three have returned. At the
// end of the kernel it closes the socket politely.
func (k *Kernel) serve(c *websocket.Conn, f framing) error {
	k.cmu.Lock()
	k.cur = c
	k.cmu.Unlock()
	defer func() {
		k.cmu.Lock()
		k.cur = nil
		k.cmu.Unlock()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	lost := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); lost <- k.readLoop(c, f) }()
	go func() { defer wg.Done(); lost <- k.writeLoop(ctx, c, f) }()
	go func() { defer wg.Done(); lost <- k.pingLoop(ctx, c) }()
	var err error
	select {
	case err = <-lost:
		c.CloseNow()
	case <-k.stop:
		err = k.Err()
		closeGently(c)
	}
	cancel()
	wg.Wait()
	return err
}

// closeGently closes c with a close handshake, or abruptly after
// closeGrace.
func closeGently(c *websocket.Conn) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		c.Close(websocket.StatusNormalClosure, "aiod ends the session")
	}()
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		c.CloseNow()
		<-closed
	}
}

// readLoop is the socket's only reader; it returns when the socket fails
// or is closed.
func (k *Kernel) readLoop(c *websocket.Conn, f framing) error {
	for {
		typ, b, err := c.Read(context.Background())
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		m, err := decodeFrame(f, typ, b)
		if err != nil {
			k.malformed.Add(1)
			k.opts.Counter.Count(jupyter.DroppedMessages, "malformed", 1)
			k.log.Debug("message dropped", "err", err)
			continue
		}
		k.dispatch(m)
	}
}

// dispatch drops a message seen already (a replay after a reconnect),
// routes the answers to aiod's own requests to their waiter (see expect),
// and hands the rest to the Handler once the kernel is ready.
func (k *Kernel) dispatch(m *jupyter.Message) {
	if id := m.Header.MsgID; id != "" && !k.recent.add(id) {
		k.duplicates.Add(1)
		k.opts.Counter.Count(jupyter.DroppedMessages, "duplicate", 1)
		return
	}
	if m.Channel == jupyter.IOPub && m.Header.MsgType == jupyter.MsgStatus && m.Parent.MsgID == "" {
		k.serverStatus(jupyter.ExecutionState(m.Content))
	}
	if m.Channel == jupyter.Shell && k.replacedBy(m.Header.Session) {
		// The "restarting" status went out while no socket was open (or
		// the server restarted the process as it was being deleted).
		k.endAndDelete(k.gone("its process was replaced (the server restarted it), losing its state"))
	}
	if k.replies.Route(m) {
		return
	}
	if k.ready.Load() {
		k.opts.Handler(m)
	}
}

// serverStatus acts on the statuses Jupyter Server itself publishes about
// the kernel (with no parent). "restarting" means the kernel process died
// and the server started a new one: the running execution will never be
// answered and the state is lost, so the Kernel ends, as a local kernel
// whose process died does, and the restarted kernel is deleted. "dead"
// means the server gave up restarting it; the watcher confirms.
func (k *Kernel) serverStatus(state string) {
	switch state {
	case jupyter.StateRestarting:
		if k.ready.Load() && k.restarting.Load() == 0 {
			k.endAndDelete(k.gone("it died and the server restarted it, losing its state"))
		}
	case jupyter.StateDead:
		select {
		case k.check <- struct{}{}:
		default:
		}
	}
}

// replacedBy says whether a shell reply signed with session comes from
// another kernel process than the last handshake's, outside a Restart.
func (k *Kernel) replacedBy(session string) bool {
	if session == "" || !k.ready.Load() || k.restarting.Load() != 0 {
		return false
	}
	p := k.procSession.Load()
	return p != nil && *p != "" && *p != session
}

// writeLoop is the socket's only writer: it takes the messages of send.
// A message it could not write whole (the socket failed or was being
// dropped) is handed to the next socket's writer, so a send only fails when
// the kernel ends or the sender's ctx does. A failed write drops the
// socket.
func (k *Kernel) writeLoop(ctx context.Context, c *websocket.Conn, f framing) error {
	for {
		var r sendReq
		select {
		case r = <-k.retry: // first what the previous socket's writer could not write
		default:
			select {
			case <-ctx.Done():
				return nil
			case r = <-k.out:
			}
		}
		if ctx.Err() != nil {
			// Never blocks: one writer at a time, and it emptied retry
			// before taking r.
			k.retry <- r
			return nil
		}
		typ, b, err := encodeFrame(f, r.m)
		if err != nil {
			r.done <- err
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, k.opts.PingTimeout+time.Duration(len(b)>>20)*time.Second)
		err = c.Write(wctx, typ, b)
		cancel()
		if err != nil {
			// The frame was not flushed whole (coder/websocket reports a
			// complete flush as success), and the server drops a partial
			// frame with the connection: the next socket sends it.
			k.retry <- r
			return fmt.Errorf("write to channels socket: %w", err)
		}
		r.done <- nil
	}
}

// pingLoop pings every PingInterval; a pong missing for PingTimeout drops
// the socket.
func (k *Kernel) pingLoop(ctx context.Context, c *websocket.Conn) error {
	t := time.NewTicker(k.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, k.opts.PingTimeout)
		err := c.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("no pong within %s: %w", k.opts.PingTimeout, err)
		}
	}
}

// reconnect opens the channels socket again with the same session id,
// retrying with backoff for ReconnectTimeout. It gives up at once when the
// server no longer has the kernel or refuses the token; when time runs out
// it checks the kernel's model (a server that answers REST but not the
// socket may have lost the kernel) and otherwise declares the server
// unreachable.
func (k *Kernel) reconnect(cause error) (*websocket.Conn, framing, error) {
	deadline := time.Now().Add(k.opts.ReconnectTimeout)
	delay := reconnectMin
	last := cause
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(jitter(delay))
		select {
		case <-t.C:
		case <-k.stop:
			t.Stop()
			return nil, 0, k.Err()
		}
		budget := max(min(time.Until(deadline), k.opts.PingTimeout), minDial)
		ctx, cancel := context.WithTimeout(k.life, budget)
		c, f, err := k.dial(ctx)
		cancel()
		switch {
		case err == nil:
			return c, f, nil
		case k.stopped():
			return nil, 0, k.Err()
		case errors.Is(err, ErrGone):
			return nil, 0, err
		case statusOf(err) == http.StatusUnauthorized || statusOf(err) == http.StatusForbidden:
			return nil, 0, fmt.Errorf("reopen channels socket of remote kernel %s on %s: %w", k.model.ID, k.client.endpoint, err)
		}
		k.log.Debug("reconnect failed", "attempt", attempt, "err", err)
		last = err
		if time.Now().After(deadline) {
			if gone := k.checkGone(); gone != nil {
				return nil, 0, gone
			}
			return nil, 0, &UnreachableError{KernelID: k.model.ID, Endpoint: k.client.endpoint, Attempts: attempt, Cause: last}
		}
		delay = min(2*delay, reconnectMax)
	}
}

// jitter returns d ± 20%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}

// watch GETs the kernel's model every CheckInterval (and when dispatch saw
// the server report a dead kernel) and ends the kernel when the server no
// longer has it or reports it dead. Other failures are left to the socket's
// pings and reconnects.
func (k *Kernel) watch() {
	defer k.wg.Done()
	t := time.NewTicker(k.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
		case <-k.check:
		}
		if gone := k.checkGone(); gone != nil {
			k.log.Debug("remote kernel gone", "reason", gone.Reason)
			k.end(gone, false)
			return
		}
	}
}

// checkGone GETs the kernel's model and returns a *GoneError when the
// server does not know the kernel or reports it dead, else nil.
func (k *Kernel) checkGone() *GoneError {
	ctx, cancel := context.WithTimeout(k.life, k.opts.PingTimeout)
	defer cancel()
	m, err := k.client.Kernel(ctx, k.model.ID)
	var gone *GoneError
	switch {
	case errors.As(err, &gone):
		return gone
	case err != nil:
		k.log.Debug("check kernel model failed", "err", err)
	case m.ExecutionState == jupyter.StateDead:
		return k.gone("the server reports it dead")
	}
	return nil
}

// idSet remembers the last n ids added.
type idSet struct {
	ring []string
	next int
	set  map[string]struct{}
}

func newIDSet(n int) *idSet {
	return &idSet{ring: make([]string, n), set: make(map[string]struct{}, n)}
}

// add records id and reports whether it was not among the last n ids.
func (s *idSet) add(id string) bool {
	if _, ok := s.set[id]; ok {
		return false
	}
	if old := s.ring[s.next]; old != "" {
		delete(s.set, old)
	}
	s.ring[s.next] = id
	s.set[id] = struct{}{}
	s.next = (s.next + 1) % len(s.ring)
	return true
}
