package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Defaults for the zero values of Options.
const (
	DefaultStartTimeout     = 120 * time.Second
	DefaultPingInterval     = 15 * time.Second
	DefaultPingTimeout      = 10 * time.Second
	DefaultCheckInterval    = 10 * time.Second
	DefaultReconnectTimeout = 30 * time.Second
	DefaultDeleteTimeout    = 30 * time.Second
	DefaultReadLimit        = 64 << 20
)

const (
	// infoRetry is the pause between two kernel_info_requests of the
	// readiness handshake (the first may be lost while the server wires
	// the kernel's channels).
	infoRetry = 2 * time.Second
	// recentIDs is how many msg_ids are remembered to drop replays.
	recentIDs = 4096
	// deleteRetry is the pause between two DELETEs answered with a 5xx.
	deleteRetry = 500 * time.Millisecond
)

// Options configure Start. Only Client is required.
type Options struct {
	// Client is the Jupyter server to run the kernel on.
	Client *Client
	// KernelName is the kernelspec to start; empty means the server's
	// default.
	KernelName string
	// Handler receives every message read from the kernel once it is
	// ready, with Message.Channel set ("shell", "iopub", "stdin" or
	// "control") and each message at most once. It is called from the
	// kernel's one reader goroutine and must not block. Nil discards the
	// messages.
	Handler jupyter.Handler
	// Env is sent as the "env" of POST /api/kernels. Enterprise Gateway
	// passes KERNEL_* variables (e.g. KERNEL_USERNAME) and its allow-listed
	// names on to the kernel; Jupyter Server ignores them.
	Env map[string]string
	// StartTimeout bounds Start (the POST, which may take minutes on a
	// cluster, the WebSocket and the readiness handshake); zero means
	// DefaultStartTimeout. The ctx given to Start bounds it too.
	StartTimeout time.Duration
	// PingInterval is the time between two WebSocket pings; zero means
	// DefaultPingInterval.
	PingInterval time.Duration
	// PingTimeout bounds the wait for a pong, and every write; a socket
	// that misses it is dropped and reconnected. Zero means
	// DefaultPingTimeout.
	PingTimeout time.Duration
	// CheckInterval is the time between two GETs of the kernel's model,
	// which notice a kernel culled or deleted while its socket stays
	// open; zero means DefaultCheckInterval.
	CheckInterval time.Duration
	// ReconnectTimeout is how long a dropped channels socket is retried,
	// with backoff, before the server is declared unreachable and the
	// kernel dead; zero means DefaultReconnectTimeout.
	ReconnectTimeout time.Duration
	// DeleteTimeout bounds the DELETE of Close; zero means
	// DefaultDeleteTimeout.
	DeleteTimeout time.Duration
	// ReadLimit is the largest WebSocket message accepted, in bytes; zero
	// means DefaultReadLimit. A larger message drops the socket.
	ReadLimit int64
	// Logger receives debug logs. Nil discards them.
	Logger *slog.Logger
	// Counter receives the count of every message dropped (name
	// "kernel_dropped_messages", label the reason). Nil counts nothing.
	Counter jupyter.Counter
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.StartTimeout, DefaultStartTimeout)
	def(&o.PingInterval, DefaultPingInterval)
	def(&o.PingTimeout, DefaultPingTimeout)
	def(&o.CheckInterval, DefaultCheckInterval)
	def(&o.ReconnectTimeout, DefaultReconnectTimeout)
	def(&o.DeleteTimeout, DefaultDeleteTimeout)
	if o.ReadLimit <= 0 {
		o.ReadLimit = DefaultReadLimit
	}
	if o.Handler == nil {
		o.Handler = func(*jupyter.Message) {}
	}
	if o.Counter == nil {
		o.Counter = jupyter.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

var (
	_ jupyter.Runtime   = (*Kernel)(nil)
	_ jupyter.Completer = (*Kernel)(nil)
)

// Kernel is a kernel running on a Jupyter server, and aiod's channels
// WebSocket to it. All methods are safe for concurrent use.
//
// A Kernel ends in one of three ways: Close (which deletes it on the
// server), the server losing it (Err wraps ErrGone), or the server
// becoming unreachable (Err wraps ErrUnreachable). Either way Done is
// closed once every goroutine it owned has returned.
type Kernel struct {
	// Static after Start.
	client  *Client
	model   KernelModel
	session string // the Jupyter session id: channels URL and our headers
	opts    Options
	log     *slog.Logger

	// Set by the first handshake before ready is stored; read-only
	// afterwards.
	info      json.RawMessage
	infoReply jupyter.KernelInfoReply

	ready      atomic.Bool  // the first handshake is over: messages go to Handler
	restarting atomic.Int32 // Restart calls in progress
	// procSession is the session id the kernel's process signs its
	// messages with (ipykernel makes one per process), from the last
	// handshake's kernel_info_reply: a shell reply signed with another
	// says the server restarted the process behind aiod's back.
	procSession atomic.Pointer[string]
	closing     atomic.Bool // Close has been called
	byClose     atomic.Bool // the end was begun by Close or a failed Start
	protocol    atomic.Int32

	// Counters.
	reconnects atomic.Uint64
	duplicates atomic.Uint64
	malformed  atomic.Uint64

	out   chan sendReq  // to the current connection's writer; never closed
	retry chan sendReq  // a request taken by a writer whose socket was dropped; buffer 1
	check chan struct{} // pokes the watcher for an early model check; buffer 1

	life       context.Context // done when the end begins; bounds background calls
	cancelLife context.CancelFunc

	recent *idSet // owned by the reader of the current connection

	replies jupyter.Replies // aiod's own requests (kernel_info, interrupt, shutdown)

	cmu sync.Mutex
	cur *websocket.Conn // guarded by cmu; the open channels socket or nil

	ended jupyter.Ended // why the kernel ended

	endOnce sync.Once
	stop    chan struct{}  // closed when the end begins
	deleted chan struct{}  // closed once the DELETE of an end byClose is over
	done    chan struct{}  // closed when the end is over
	wg      sync.WaitGroup // run, watch
}

// sendReq asks the writer to send m and report on done (buffered).
type sendReq struct {
	m    *jupyter.Message
	done chan error
}

// Start starts a kernel on opts.Client's server and returns once it has
// answered a kernel_info_request over the channels WebSocket: POST
// /api/kernels, then the WebSocket (offering SubprotocolV1, falling back to
// the legacy framing when the server selects none), then the handshake. It
// gives up after opts.StartTimeout or when ctx is done, and then deletes
// the kernel it created and leaves no goroutine behind. Errors read "start
// remote kernel NAME on ENDPOINT: ...".
func Start(ctx context.Context, opts Options) (*Kernel, error) {
	if opts.Client == nil {
		return nil, errors.New("start remote kernel: no Jupyter server client given")
	}
	opts.setDefaults()
	name := opts.KernelName
	if name == "" {
		name = "(default)"
	}
	fail := func(err error) error {
		return fmt.Errorf("start remote kernel %s on %s: %w", name, opts.Client.endpoint, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, opts.StartTimeout,
		fmt.Errorf("%w (start timeout %s)", context.DeadlineExceeded, opts.StartTimeout))
	defer cancel()
	model, err := opts.Client.startKernel(ctx, opts.KernelName, opts.Env)
	if err != nil {
		return nil, fail(err)
	}
	k := newKernel(opts, model)
	k.log.Debug("remote kernel created", "name", model.Name)
	c, f, err := k.dial(ctx)
	if err != nil {
		go k.supervise()
		return nil, fail(k.abort(ctx, err))
	}
	k.protocol.Store(int32(f))
	k.wg.Add(2)
	go k.run(c, f)
	go k.watch()
	go k.supervise()
	if err := k.handshake(ctx, true); err != nil {
		return nil, fail(k.abort(ctx, err))
	}
	return k, nil
}

func newKernel(opts Options, model KernelModel) *Kernel {
	k := &Kernel{
		client:  opts.Client,
		model:   model,
		session: jupyter.NewID(),
		opts:    opts,
		out:     make(chan sendReq),
		retry:   make(chan sendReq, 1),
		check:   make(chan struct{}, 1),
		recent:  newIDSet(recentIDs),
		stop:    make(chan struct{}),
		deleted: make(chan struct{}),
		done:    make(chan struct{}),
	}
	k.life, k.cancelLife = context.WithCancel(context.Background())
	k.log = opts.Logger.With("remote_kernel", model.ID, "endpoint", opts.Client.endpoint)
	return k
}

// abort ends a kernel whose start failed, deletes it on the server, and
// returns the error to report: the kernel's end cause (gone, unreachable)
// when it ended first, else err.
func (k *Kernel) abort(ctx context.Context, err error) error {
	if cause := k.Err(); cause != nil && !errors.Is(cause, ErrClosed) {
		err = cause
	}
	k.shutdown(ctx, err)
	return err
}

// handshake sends kernel_info_request on shell, again every infoRetry,
// until a kernel_info_reply comes back. Its messages never reach the
// Handler. The first (at Start) records the reply and opens the gate to
// the Handler.
func (k *Kernel) handshake(ctx context.Context, first bool) error {
	replies := make(chan *jupyter.Message, 64)
	var ids []string
	defer func() { k.replies.Forget(ids...) }()
	tick := time.NewTicker(infoRetry)
	defer tick.Stop()
	var reply *jupyter.Message
	gotIOPub := false
	for {
		id := jupyter.NewID()
		ids = append(ids, id)
		k.replies.Expect(id, replies)
		req := &jupyter.Message{Channel: "shell", Header: jupyter.NewHeader(k.session, id, "kernel_info_request")}
		if err := k.send(ctx, req); err != nil {
			return fmt.Errorf("send kernel_info_request: %w", err)
		}
		for wait := true; wait; {
			select {
			case m := <-replies:
				// Both the shell reply and an iopub message of ours: the
				// server subscribes to a (re)started kernel's iopub anew, and
				// what the kernel publishes before that lands is lost.
				switch {
				case m.Channel == "iopub":
					gotIOPub = true
				case m.Channel == "shell" && m.Header.MsgType == "kernel_info_reply":
					reply = m
				}
				if reply == nil || !gotIOPub {
					continue
				}
				ps := reply.Header.Session
				k.procSession.Store(&ps)
				if first {
					return k.becomeReady(reply.Content)
				}
				return nil
			case <-tick.C:
				wait = false
			case <-ctx.Done():
				return fmt.Errorf("wait for kernel_info_reply: %w", context.Cause(ctx))
			case <-k.stop:
				return fmt.Errorf("wait for kernel_info_reply: %w", k.Err())
			}
		}
	}
}

// becomeReady parses the kernel_info_reply and opens the gate to Handler.
func (k *Kernel) becomeReady(info json.RawMessage) error {
	if err := json.Unmarshal(info, &k.infoReply); err != nil {
		return fmt.Errorf("decode kernel_info_reply: %w", err)
	}
	k.info = info
	k.ready.Store(true)
	k.log.Debug("remote kernel ready", "protocol", k.Subprotocol(), "version", k.infoReply.LanguageInfo.Version)
	return nil
}

// ID returns the kernel's id on the server.
func (k *Kernel) ID() string { return k.model.ID }

// Session returns the Jupyter session id: the channels socket's session_id
// (kept across reconnects, so that the server replays what it buffered) and
// the session of the headers aiod writes.
func (k *Kernel) Session() string { return k.session }

// Endpoint returns the server's endpoint (credentials redacted).
func (k *Kernel) Endpoint() string { return k.client.endpoint }

// Model returns the kernel's model as POST /api/kernels answered it.
func (k *Kernel) Model() KernelModel { return k.model }

// KernelInfo returns the content of the kernel's kernel_info_reply.
func (k *Kernel) KernelInfo() json.RawMessage { return k.info }

// Subprotocol returns the framing of the current (or last) channels
// socket: SubprotocolV1, or "" for the legacy protocol.
func (k *Kernel) Subprotocol() string {
	if framing(k.protocol.Load()) == v1Framing {
		return SubprotocolV1
	}
	return ""
}

// Info describes the kernel for the runtime interface.
func (k *Kernel) Info() jupyter.RuntimeInfo {
	lang := strings.ToLower(k.infoReply.LanguageInfo.Name)
	if lang == "" {
		lang = "python"
	}
	return jupyter.RuntimeInfo{
		Backend:  "jupyter",
		Language: lang,
		Name:     k.model.Name,
		PID:      0,
		Version:  k.infoReply.LanguageInfo.Version,
	}
}

// Stats counts what the channels connection went through.
type Stats struct {
	Reconnects uint64 // channels sockets opened again after a drop
	Duplicates uint64 // messages dropped because their msg_id was seen already
	Malformed  uint64 // frames that were not Jupyter messages
}

// Stats returns the counters.
func (k *Kernel) Stats() Stats {
	return Stats{
		Reconnects: k.reconnects.Load(),
		Duplicates: k.duplicates.Load(),
		Malformed:  k.malformed.Load(),
	}
}

// Done is closed when the kernel has been closed or has ended, and all its
// goroutines have returned.
func (k *Kernel) Done() <-chan struct{} { return k.done }

// Err returns nil while the kernel runs. Once it has ended it returns
// ErrClosed after a Close, or an error wrapping ErrGone (a *GoneError) or
// ErrUnreachable (an *UnreachableError), or the error that made the server
// refuse the channels socket.
func (k *Kernel) Err() error { return k.ended.Err() }

// end begins the end of the kernel with cause err (the first cause wins)
// and reports whether this call began it. byClose says that the caller
// will delete the kernel on the server and then close k.deleted.
func (k *Kernel) end(err error, byClose bool) bool {
	began := false
	k.endOnce.Do(func() {
		k.ended.Set(err)
		k.byClose.Store(byClose)
		began = true
		k.cancelLife()
		close(k.stop)
	})
	return began
}

// supervise closes done once the end is over: the goroutines have
// returned and, for an end by Close, the DELETE is over. It is not in wg:
// it is the goroutine that waits for wg.
func (k *Kernel) supervise() {
	<-k.stop
	k.wg.Wait()
	if k.byClose.Load() {
		<-k.deleted
	}
	k.log.Debug("remote kernel ended", "err", k.Err())
	close(k.done)
}

// stopped reports whether the end has begun.
func (k *Kernel) stopped() bool {
	select {
	case <-k.stop:
		return true
	default:
		return false
	}
}

// Close deletes the kernel on the server (DELETE /api/kernels/{id}; 404
// means it was gone already), closes the channels socket politely, and
// waits for the kernel's goroutines. The DELETE is bounded by
// opts.DeleteTimeout but not by ctx: a kernel left running on a cluster
// costs more than the wait. Close is idempotent and safe after the kernel
// ended; it returns the DELETE's error, if any, the first time only. After
// a kernel ended because its server stopped answering, Close still tries
// the DELETE, quietly, in case the server is back.
func (k *Kernel) Close(ctx context.Context) error {
	if !k.closing.CompareAndSwap(false, true) {
		<-k.done
		return nil
	}
	if errors.Is(k.Err(), ErrUnreachable) {
		if err := k.deleteKernel(ctx); err != nil {
			k.log.Debug("delete after the server stopped answering failed", "err", err)
		}
	}
	return k.shutdown(ctx, ErrClosed)
}

// shutdown ends the kernel with cause, deletes it on the server when this
// call began the end, and waits for the end.
func (k *Kernel) shutdown(ctx context.Context, cause error) error {
	var err error
	if k.end(cause, true) {
		if err = k.deleteKernel(ctx); err != nil {
			err = fmt.Errorf("close remote kernel %s: %w", k.model.ID, err)
		}
		close(k.deleted)
	}
	<-k.done
	return err
}

// deleteKernel deletes the kernel on the server; a kernel already gone is
// not an error. A 5xx is tried again every deleteRetry until DeleteTimeout:
// Jupyter Server answers 500 to a DELETE while it restarts the kernel.
func (k *Kernel) deleteKernel(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.opts.DeleteTimeout)
	defer cancel()
	for {
		err := k.client.DeleteKernel(ctx, k.model.ID)
		if errors.Is(err, ErrGone) {
			return nil
		}
		if statusOf(err) < 500 {
			return err
		}
		k.log.Debug("delete failed; again", "err", err)
		t := time.NewTimer(deleteRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// Interrupt asks the server to interrupt the kernel (POST
// /api/kernels/{id}/interrupt): the running code sees a KeyboardInterrupt
// and the kernel keeps its state. A kernel the server no longer has ends
// (Err wraps ErrGone) and Interrupt returns that error.
func (k *Kernel) Interrupt(ctx context.Context) error {
	if k.stopped() {
		return fmt.Errorf("interrupt remote kernel %s: %w", k.model.ID, k.Err())
	}
	if err := k.client.interruptKernel(ctx, k.model.ID); err != nil {
		k.endIfGone(err)
		return fmt.Errorf("interrupt remote kernel %s: %w", k.model.ID, err)
	}
	return nil
}

// Restart asks the server to restart the kernel (POST
// /api/kernels/{id}/restart), which loses its state, then waits until it
// answers a kernel_info_request again. The channels socket stays open.
func (k *Kernel) Restart(ctx context.Context) error {
	if k.stopped() {
		return fmt.Errorf("restart remote kernel %s: %w", k.model.ID, k.Err())
	}
	k.restarting.Add(1)
	defer k.restarting.Add(-1)
	if err := k.client.restartKernel(ctx, k.model.ID); err != nil {
		k.endIfGone(err)
		return fmt.Errorf("restart remote kernel %s: %w", k.model.ID, err)
	}
	if err := k.handshake(ctx, false); err != nil {
		return fmt.Errorf("restart remote kernel %s: %w", k.model.ID, err)
	}
	return nil
}

// endAndDelete ends the kernel with cause err and deletes it on the
// server, without blocking the caller.
func (k *Kernel) endAndDelete(err error) {
	if !k.end(err, true) {
		return
	}
	go func() { // supervise waits for it through deleted
		defer close(k.deleted)
		if err := k.deleteKernel(context.Background()); err != nil {
			k.log.Debug("delete of the ended kernel failed", "err", err)
		}
	}()
}

// endIfGone ends the kernel when err says the server no longer has it.
func (k *Kernel) endIfGone(err error) {
	var gone *GoneError
	if errors.As(err, &gone) {
		k.end(gone, false)
	}
}

// Execute sends an execute_request with msg_id req.MsgID on shell and
// returns once it is written to the channels socket (output arrives
// through the Handler). While the socket is being reconnected it waits. It
// fails when req.MsgID is empty, when ctx ends first, or when the kernel
// has ended (the error then wraps Err's value).
func (k *Kernel) Execute(ctx context.Context, req jupyter.ExecuteRequest) error {
	m, err := jupyter.NewExecuteRequest(k.session, req)
	if err != nil {
		return fmt.Errorf("send %w", err)
	}
	if err := k.send(ctx, m); err != nil {
		return fmt.Errorf("send execute_request: %w", err)
	}
	return nil
}

// Send passes a client's message through to the kernel on m.Channel
// ("shell", "control" or "stdin") as given. Replies arrive through the
// Handler. Send fails like Execute.
func (k *Kernel) Send(ctx context.Context, m *jupyter.Message) error {
	switch m.Channel {
	case "shell", "control", "stdin":
	default:
		return fmt.Errorf("send %s: cannot send on channel %q", m.Header.MsgType, m.Channel)
	}
	if err := k.send(ctx, m); err != nil {
		return fmt.Errorf("send %s on %s: %w", m.Header.MsgType, m.Channel, err)
	}
	return nil
}

// send hands m to the current connection's writer. It returns when m is
// written, ctx is done, or the kernel ends. When ctx ends first the
// message may still be sent.
func (k *Kernel) send(ctx context.Context, m *jupyter.Message) error {
	r := sendReq{m: m, done: make(chan error, 1)}
	select {
	case k.out <- r:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-k.stop:
		return k.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-k.stop:
		return k.Err()
	}
}

// request sends aiod's own request m and returns its reply of replyType;
// the reply does not reach the Handler.
func (k *Kernel) request(ctx context.Context, m *jupyter.Message, replyType string) (*jupyter.Message, error) {
	return jupyter.Request(ctx, &k.replies, k.Send, m, replyType, k.stop, k.Err)
}

// Complete asks the remote kernel for completions of code at cursorPos;
// while it runs a cell, the answer waits for the cell (bounded by ctx).
func (k *Kernel) Complete(ctx context.Context, code string, cursorPos int) (*jupyter.CompleteReply, error) {
	return jupyter.Complete(ctx, k.request, k.session, code, cursorPos)
}

// Inspect asks the remote kernel about the object at cursorPos.
func (k *Kernel) Inspect(ctx context.Context, code string, cursorPos, detailLevel int) (*jupyter.InspectReply, error) {
	return jupyter.Inspect(ctx, k.request, k.session, code, cursorPos, detailLevel)
}
