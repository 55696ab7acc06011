package jupyterapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/wsock"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/execution"
)

// kernelChannels upgrades GET /api/kernels/{id}/channels. The socket
// watches the kernel's session: it receives every iopub message (whoever
// caused it: REST calls, other front ends) and the shell, control and stdin
// replies to its own requests (matched by the header's session). Client
// messages go to the kernel as they are.
func (h *Surface) kernelChannels(ctx *fasthttp.RequestCtx) {
	sess := h.kernelOr404(ctx)
	if sess == nil {
		return
	}
	sctx, cancel := context.WithTimeout(h.core.Ctx(), h.core.Cfg.KernelStartTimeout)
	_, err := sess.EnsureRuntime(sctx)
	cancel()
	if err != nil {
		jfail(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	h.hub.Upgrade(ctx, ChannelsRoute, []string{jupyter.SubprotocolV1}, func(wc *wsock.Conn) {
		js := &jupyterSocket{wc: wc, sess: sess, v1: wc.WS.Subprotocol() == jupyter.SubprotocolV1, own: map[string]bool{},
			stop: make(chan struct{}), startTimeout: h.core.Cfg.KernelStartTimeout}
		detach := sess.Attach() // the idle reaper leaves an attached session alone
		defer detach()
		sess.Mux().Watch(js)
		defer sess.Mux().Unwatch(js)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			js.monitor()
		}()
		defer wg.Wait()
		defer close(js.stop)
		wc.Run(js.render, js.read)
	})
}

// jupyterSocket is the protocol state of one channels socket.
type jupyterSocket struct {
	wc           *wsock.Conn
	sess         *stream.Session
	v1           bool
	stop         chan struct{} // closed when the socket is done; ends monitor
	startTimeout time.Duration // bound on starting the session's kernel again

	mu  sync.Mutex      // guards own
	own map[string]bool // header.session values this client sent
}

// Deliver is called by the session's mux; it never blocks.
func (js *jupyterSocket) Deliver(ev execution.Event) {
	m := ev.Msg
	if m == nil {
		return
	}
	if m.Channel != jupyter.IOPub {
		js.mu.Lock()
		mine := js.own[m.Parent.Session]
		js.mu.Unlock()
		if !mine {
			return
		}
	}
	js.sess.Touch()
	js.wc.Push(wsock.Item{Ev: ev})
}

// Bounds of what one socket's client may have waiting for the kernel
// (while it starts again after a restart, say): past them a message is
// refused as any other aiod cannot pass on.
const (
	sendQueueMessages = 256
	sendQueueBytes    = 16 << 20
	maxClientSessions = 64 // distinct header.session values one socket may send
)

// read passes the client's messages to the kernel. A message aiod cannot
// take is answered, never dropped in silence: a request gets its reply with
// status error, anything else closes the socket with the reason; both are
// logged at warn level. Sending is a goroutine of its own, fed in order
// through a bounded queue: the reader goes on reading (and answering
// pings) while the kernel starts again, which takes seconds.
func (js *jupyterSocket) read(ctx context.Context) error {
	type queued struct {
		m    *jupyter.Message
		size int
	}
	sends := make(chan queued, sendQueueMessages)
	var waiting atomic.Int64 // bytes in sends
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for q := range sends {
			err := js.send(ctx, q.m)
			waiting.Add(-int64(q.size))
			if err != nil {
				js.wc.Drop("kernel_send_failed", 1)
				js.refuse(q.m.Channel, q.m.Header, "the kernel could not be sent the message: "+err.Error())
			}
		}
	}()
	defer func() {
		close(sends)
		<-sent
	}()
	for {
		typ, b, err := js.wc.Read()
		if err != nil {
			return err
		}
		var m *jupyter.Message
		if js.v1 {
			m, err = jupyter.DecodeV1(b)
		} else {
			m, err = jupyter.DecodeLegacy(b, typ == websocket.MessageBinary)
		}
		if err == nil && m.Header.MsgType == "" {
			err = fmt.Errorf("%w: header must be an object with msg_type", jupyter.ErrMalformed)
		}
		if err != nil {
			js.wc.Drop("bad_client_message", 1)
			var bad *jupyter.BadMessageError
			if errors.As(err, &bad) {
				js.refuse(bad.Channel, bad.Header, err.Error())
				continue
			}
			js.wc.Log().Warn("kernel websocket: message refused, closing the socket", "err", err)
			js.wc.CloseWith(websocket.StatusInvalidFramePayloadData, closeReason(err.Error()), "bad_client_message")
			continue
		}
		switch m.Channel {
		case "shell", "control", "stdin":
		default:
			js.wc.Drop("bad_client_channel", 1)
			js.refuse(m.Channel, m.Header, fmt.Sprintf("channel %q: a client sends on shell, control or stdin", m.Channel))
			continue
		}
		js.mu.Lock()
		known := js.own[m.Header.Session]
		if !known && len(js.own) < maxClientSessions {
			js.own[m.Header.Session], known = true, true
		}
		js.mu.Unlock()
		if !known {
			js.wc.Drop("too_many_sessions", 1)
			js.refuse(m.Channel, m.Header, fmt.Sprintf("one socket may send from %d header sessions at most", maxClientSessions))
			continue
		}
		js.sess.Touch()
		if waiting.Add(int64(len(b))) > sendQueueBytes {
			waiting.Add(-int64(len(b)))
			js.wc.Drop("send_queue_full", 1)
			js.refuse(m.Channel, m.Header, fmt.Sprintf("the kernel is not taking messages (starting again?) and %d MiB wait already", sendQueueBytes>>20))
			continue
		}
		select {
		case sends <- queued{m, len(b)}:
		default:
			waiting.Add(-int64(len(b)))
			js.wc.Drop("send_queue_full", 1)
			js.refuse(m.Channel, m.Header, fmt.Sprintf("the kernel is not taking messages (starting again?) and %d wait already", sendQueueMessages))
		}
	}
}

// refuse answers a client's message aiod could not pass on: a request
// (msg_type *_request) gets its *_reply with status error on its channel
// (shell when the channel was not one a client sends on); a message that
// expects no reply closes the socket with the reason.
func (js *jupyterSocket) refuse(channel string, h jupyter.Header, reason string) {
	base, isRequest := strings.CutSuffix(h.MsgType, "_request")
	if !isRequest || base == "" || h.MsgID == "" {
		js.wc.Log().Warn("kernel websocket: message refused, closing the socket",
			"channel", channel, "msg_type", h.MsgType, "msg_id", h.MsgID, "reason", reason)
		js.wc.CloseWith(websocket.StatusInvalidFramePayloadData, closeReason(h.MsgType+": "+reason), "bad_client_message")
		return
	}
	js.wc.Log().Warn("kernel websocket: request refused with an error reply",
		"channel", channel, "msg_type", h.MsgType, "msg_id", h.MsgID, "reason", reason)
	switch channel {
	case "shell", "control", "stdin":
	default:
		channel = jupyter.Shell
	}
	content, _ := json.MarshalWithOption(map[string]any{
		"status": "error", "ename": "BadMessage", "evalue": reason, "traceback": []string{"BadMessage: " + reason},
	}, json.DisableHTMLEscape())
	reply := jupyter.NewMessage(channel, h.Session, base+"_reply", content)
	reply.Parent = h
	js.wc.Push(wsock.Item{Ev: execution.Event{Msg: reply}})
}

// closeReason fits a reason into a close frame (at most 123 bytes).
func closeReason(s string) string {
	if len(s) <= 123 {
		return s
	}
	s = s[:120]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

func (js *jupyterSocket) send(ctx context.Context, m *jupyter.Message) error {
	sctx, cancel := context.WithTimeout(ctx, js.startTimeout)
	defer cancel()
	rt, err := js.sess.EnsureRuntime(sctx)
	if err != nil {
		return err
	}
	rs, ok := rt.(jupyter.Sender)
	if !ok {
		return fmt.Errorf("the session's runtime (%s) is not a Jupyter kernel", rt.Info().Backend)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	return rs.Send(wctx, m)
}

// monitor closes the socket when the session ends, and tells the client
// "dead" when the kernel dies (a restart or a REST call starts a new one).
// The session tells it when its runtime changes; it does not poll.
func (js *jupyterSocket) monitor() {
	sess := js.sess
	var ended jupyter.Runtime // the runtime whose end was handled
	for {
		rt, changed := sess.RuntimeChanges()
		var done <-chan struct{}
		if rt != nil && rt != ended {
			done = rt.Done()
		}
		select {
		case <-js.stop:
			return
		case <-sess.Closed():
			js.wc.CloseWith(wsock.CloseNormal, "kernel shut down", "session_closed")
			return
		case <-changed:
		case <-done:
			ended = rt
			var dead *jupyter.DeadError
			if errors.As(rt.Err(), &dead) {
				js.wc.Push(wsock.Item{Ev: execution.Event{Msg: jupyter.NewStatus(jupyter.StateDead), State: jupyter.StateDead}})
			}
		}
	}
}

// render frames a kernel message for the client (writer goroutine).
func (js *jupyterSocket) render(it *wsock.Item) (websocket.MessageType, []byte, bool) {
	if it.Ev.Msg == nil {
		return 0, nil, false
	}
	if js.v1 {
		b, err := jupyter.EncodeV1(it.Ev.Msg)
		return websocket.MessageBinary, b, err == nil
	}
	b, bin, err := jupyter.EncodeLegacy(it.Ev.Msg)
	if err != nil {
		return 0, nil, false
	}
	if bin {
		return websocket.MessageBinary, b, true
	}
	return websocket.MessageText, b, true
}
