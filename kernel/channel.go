package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

// channel is one of the kernel's five sockets with its reader. Every
// socket has exactly one reader goroutine, reading for the socket's whole
// life; senders write in turn on their own goroutines (zsock.send).
type channel struct {
	name string
	sock *zsock
	port int

	reading bool          // a reader was started; set before it starts
	eofOnce sync.Once     //
	eof     chan struct{} // closed by the reader on its first read error
}

func newChannel(name string, sock *zsock, port int) *channel {
	return &channel{name: name, sock: sock, port: port, eof: make(chan struct{})}
}

func (c *channel) markEOF() { c.eofOnce.Do(func() { close(c.eof) }) }

// readLoop is c's only reader. It decodes each message and dispatches it,
// never blocking on anything but the read. After a read error (the kernel
// went away) it waits for the socket to be closed.
func (k *Kernel) readLoop(c *channel) {
	defer k.wg.Done()
	defer c.markEOF()
	for {
		zm, err := c.sock.recv()
		if err != nil {
			if k.sockCtx.Err() == nil {
				k.log.Debug("read failed", "channel", c.name, "err", err)
				c.markEOF()
				<-k.sockCtx.Done()
			}
			return
		}
		if c == k.hb {
			k.lastPong.Store(time.Now().UnixNano())
			k.pongs.Add(1)
			continue
		}
		k.used()
		m, err := decode(k.signer, c.name, zm.Frames)
		if err != nil {
			k.countDrop(c, err)
			continue
		}
		k.dispatch(m)
	}
}

func (k *Kernel) countDrop(c *channel, err error) {
	if errors.Is(err, errBadSignature) {
		k.badSig.Add(1)
		k.opts.Counter.Count(jupyter.DroppedMessages, "bad_signature", 1)
	} else {
		k.malformed.Add(1)
		k.opts.Counter.Count(jupyter.DroppedMessages, "malformed", 1)
	}
	k.log.Debug("message dropped", "channel", c.name, "err", err)
}

// dispatch routes a decoded message: to the waiter of an internal request
// (see Replies), or to the Handler once the kernel is ready. Before that,
// messages are dropped; the first iopub message proves the subscription.
func (k *Kernel) dispatch(m *jupyter.Message) {
	if m.Channel == "shell" && strings.HasSuffix(m.Header.MsgType, "_reply") {
		k.awaiting.Add(-1)
	}
	if m.Channel == "iopub" && !k.ready.Load() {
		k.iopubOnce.Do(func() { close(k.iopubSeen) })
	}
	if k.replies.Route(m) {
		return
	}
	if k.ready.Load() {
		k.opts.Handler(m)
	}
}

// send signs m with the kernel's key and writes it on c. It returns when
// the frames are written, or fails when ctx ends or the kernel ends while
// it waits for another sender's write, or when the write fails. A write
// that times out (Options.SendTimeout) may have stopped halfway through a frame:
// the kernel is then cut (sendFailed).
func (k *Kernel) send(ctx context.Context, c *channel, m *jupyter.Message) error {
	frames, err := encode(k.signer, m)
	if err != nil {
		return err
	}
	k.used()
	if c == k.shell {
		k.awaiting.Add(1)
	}
	err = c.sock.send(ctx, k.stop, frames)
	if err == nil {
		return nil
	}
	k.notSent(c)
	switch {
	case errors.Is(err, errSocketClosed):
		if kerr := k.Err(); kerr != nil {
			return kerr
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		k.sendFailed(c, err)
	}
	return err
}

// sendFailed cuts a kernel that did not take a message on c within
// Options.SendTimeout: the write may have stopped halfway through a frame, after
// which nothing on that connection can be trusted.
func (k *Kernel) sendFailed(c *channel, err error) {
	if k.sockCtx.Err() != nil || k.exited() {
		return // the kernel is ending anyway
	}
	k.log.Warn("kernel socket write timed out; killing the kernel", "channel", c.name, "err", err)
	d := deadFromSend(c.name, err)
	d.Output = k.output.String()
	k.end.Set(d)
	k.killGroup(syscall.SIGKILL)
}

// notSent takes back the reply a shell request that never reached the
// writer was counted for.
func (k *Kernel) notSent(c *channel) {
	if c == k.shell {
		k.awaiting.Add(-1)
	}
}

// Execute sends an execute_request with msg_id req.MsgID on shell and
// returns once it is written (output arrives through the Handler). It
// fails when req.MsgID is empty, when ctx ends first, or when the kernel
// has ended (the error then wraps Err's value).
func (k *Kernel) Execute(ctx context.Context, req jupyter.ExecuteRequest) error {
	m, err := jupyter.NewExecuteRequest(k.session, req)
	if err != nil {
		return fmt.Errorf("send %w", err)
	}
	if err := k.send(ctx, k.shell, m); err != nil {
		return fmt.Errorf("send execute_request: %w", err)
	}
	return nil
}

// Send passes a client's message through to the kernel on m.Channel
// ("shell", "control" or "stdin"), signed with the kernel's key. The
// header, parent header, metadata, content and buffers are sent as given.
// Replies arrive through the Handler. Send fails like Execute.
func (k *Kernel) Send(ctx context.Context, m *jupyter.Message) error {
	var c *channel
	switch m.Channel {
	case "shell":
		c = k.shell
	case "control":
		c = k.control
	case "stdin":
		c = k.stdin
	default:
		return fmt.Errorf("send %s: cannot send on channel %q", m.Header.MsgType, m.Channel)
	}
	if err := k.send(ctx, c, m); err != nil {
		return fmt.Errorf("send %s on %s: %w", m.Header.MsgType, m.Channel, err)
	}
	return nil
}

// request sends aiod's own request m on its channel and returns its reply
// of replyType; the reply does not reach the Handler.
func (k *Kernel) request(ctx context.Context, m *jupyter.Message, replyType string) (*jupyter.Message, error) {
	return jupyter.Request(ctx, &k.replies, k.Send, m, replyType, k.stop, k.Err)
}

// Complete asks the kernel for completions of code at cursorPos. The
// kernel answers shell requests in order: while it runs a cell, the answer
// waits for the cell (bounded by ctx).
func (k *Kernel) Complete(ctx context.Context, code string, cursorPos int) (*jupyter.CompleteReply, error) {
	return jupyter.Complete(ctx, k.request, k.session, code, cursorPos)
}

// Inspect asks the kernel about the object at cursorPos, like Complete.
func (k *Kernel) Inspect(ctx context.Context, code string, cursorPos, detailLevel int) (*jupyter.InspectReply, error) {
	return jupyter.Inspect(ctx, k.request, k.session, code, cursorPos, detailLevel)
}
