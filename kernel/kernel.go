package kernel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/bufconn"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/proc"
)

// Defaults for the zero values of Options.
const (
	DefaultStartTimeout      = 60 * time.Second
	DefaultHeartbeatInterval = time.Second
	DefaultHeartbeatTimeout  = 5 * time.Second
	DefaultIdleAfter         = 10 * time.Second
	// DefaultSendTimeout bounds one message's write to a kernel socket.
	// The kernel's zmq I/O thread reads its sockets whatever the Python
	// code does, so a write that waits this long means a kernel that no
	// longer reads (or a queue of a thousand unread requests).
	DefaultSendTimeout = time.Minute
)

// Options configure Start. Only Spec is required.
type Options struct {
	// Spec is the kernelspec to launch.
	Spec *Spec
	// Handler receives every message read from the iopub, shell, control
	// and stdin channels once the kernel is ready, with Message.Channel
	// set. It is called from the kernel's reader goroutines, possibly
	// several at once, and must not block. Nil discards the messages.
	Handler jupyter.Handler
	// Cwd is the kernel's working directory; empty means aiod's.
	Cwd string
	// ConnDir holds the kernel's private folder (connection file, ipc
	// sockets); "" (or too long a path) means the temporary folder.
	ConnDir string
	// Env holds extra KEY=VALUE entries. The kernel's environment is aiod's
	// own, then the spec's env, then Env; later entries win.
	Env []string
	// StartTimeout bounds the launch up to the readiness handshake;
	// zero means DefaultStartTimeout. The ctx given to Start bounds it too.
	StartTimeout time.Duration
	// HeartbeatInterval is the time between two heartbeat pings; zero
	// means DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// IdleAfter is how long a kernel goes without a message to or from it
	// (heartbeats aside) and without a shell request waiting for its reply
	// before it counts as idle: an idle kernel is not pinged until it is
	// used again. A thousand idle kernels pinged every second keep aiod
	// busy for nobody, and an idle kernel's death is seen from its process
	// anyway. Zero means DefaultIdleAfter.
	IdleAfter time.Duration
	// HeartbeatTimeout is how long the kernel may leave pings unanswered
	// before it is declared dead and killed; zero means
	// DefaultHeartbeatTimeout.
	HeartbeatTimeout time.Duration
	// SendTimeout bounds the write of one message to the kernel; a write
	// that takes longer cuts the kernel (the connection may hold half a
	// frame). Zero means DefaultSendTimeout.
	SendTimeout time.Duration
	// Logger receives debug logs and the kernel's stdout and stderr (at
	// debug level). Nil discards them.
	Logger *slog.Logger
	// Counter receives the count of every message dropped (name
	// "kernel_dropped_messages", label the reason). Nil counts nothing.
	Counter jupyter.Counter
	// Templates, when set and in fork mode, forks kernels of a forkable
	// spec (see Forkable) from that spec's warm template process instead of
	// spawning them; a start the template cannot serve is spawned. Nil
	// spawns every kernel.
	Templates *Templates
	// Transport is TransportIPC or TransportTCP; empty means ipc for
	// ipykernel specs and tcp for others.
	Transport string
	// Environ is the base of the kernel's environment, before
	// JPY_PARENT_PID, the spec's env and Env; nil means aiod's own
	// (os.Environ()). A forked kernel gets the same from its template, whose
	// TemplateConfig.Environ should be this.
	Environ []string
	// Credential, when set, runs the kernel process as that user; its
	// connection folder and file are handed to it. Forked kernels run as
	// their template's user (TemplateConfig.Credential).
	Credential *syscall.Credential
	// Confine, when set, confines the kernel: it is called with the
	// kernel's private folder once that exists, and its answer says how
	// (see Confinement). A confined kernel uses the ipc transport; a forked
	// one needs a template with TemplateConfig.Confine.
	Confine func(dir string) (*Confinement, error)
	// Admit, when set, puts the kernel's process under its limits before
	// anything of it runs: it waits at a gate (package proc) until Admit
	// returns; an error ends it and fails the start. A fork that falls back
	// to a spawn calls it again, with the new process.
	Admit func(pid int) error
	// Charge, with TemplateConfig.ChargeHome, is called before a fork: the
	// cgroup.procs file of the memory group the kernel will join, where the
	// template forks, so that what fork() copies is charged to the kernel.
	Charge func() (string, error)
}

func (o *Options) setDefaults() {
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.IdleAfter <= 0 {
		o.IdleAfter = DefaultIdleAfter
	}
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if o.SendTimeout <= 0 {
		o.SendTimeout = DefaultSendTimeout
	}
	if o.Handler == nil {
		o.Handler = func(*jupyter.Message) {}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Counter == nil {
		o.Counter = jupyter.Discard
	}
}

var (
	_ jupyter.Runtime   = (*Kernel)(nil)
	_ jupyter.Completer = (*Kernel)(nil)
)

// Kernel is a running Jupyter kernel process and aiod's connection to it.
// All methods are safe for concurrent use.
//
// A Kernel ends in one of two ways: Close, or death (its process exited or
// was killed, or it stopped answering heartbeats). Either way Done is closed
// once its process is gone and every goroutine and socket it owned has been
// released, and Err says which way it ended.
type Kernel struct {
	// Static after Start.
	id, session string
	spec        *Spec
	opts        Options
	log         *slog.Logger
	conn        *connectionInfo
	signer      *signer
	connDir     string
	viewDir     string                    // connDir as the kernel sees it
	conf        *Confinement              // nil: not confined
	waitExit    func() *jupyter.DeadError // blocks until the process has exited
	mode        string                    // StartSpawn or StartFork
	pid         int
	output      *proc.Output
	outPipe     *os.File      // read end of the kernel's stdout and stderr
	outCopy     *bufconn.Pipe // copies outPipe to output
	outDone     chan struct{} // closed when copyOutput returns
	shell       *channel
	control     *channel
	stdin       *channel
	iopub       *channel
	hb          *channel
	channels    []*channel // all five
	sockCtx     context.Context
	sockCancel  context.CancelFunc // closes every socket's life line
	exitCtx     context.Context    // done once the process has exited
	exitCancel  context.CancelFunc // called by wait only

	// Set by the handshake before ready is stored; read-only afterwards.
	info      json.RawMessage
	infoReply jupyter.KernelInfoReply

	ready     atomic.Bool  // the handshake is over: messages go to Handler
	closing   atomic.Bool  // Close has been called
	lastPong  atomic.Int64 // unix nanoseconds of the last heartbeat answer
	lastUsed  atomic.Int64 // unix nanoseconds of the last message sent or read (not hb)
	awaiting  atomic.Int64 // shell requests sent whose reply has not come
	hbIdle    atomic.Bool  // the heartbeat sleeps until hbWake
	hbWake    chan struct{}
	badSig    atomic.Uint64
	pongs     atomic.Uint64
	malformed atomic.Uint64

	iopubOnce sync.Once
	iopubSeen chan struct{} // closed on the first iopub message

	replies jupyter.Replies // aiod's own requests (kernel_info, interrupt, shutdown)
	// received counts the bytes read from shell and iopub (Received).
	received atomic.Uint64

	end jupyter.Ended // why the kernel ended

	exitErr *jupyter.DeadError // written by wait before exitCtx is done
	started chan struct{}      // closed when Start no longer touches sockets
	stop    chan struct{}      // closed when teardown begins
	done    context.Context    // done when teardown is over (AfterDone)
	over    context.CancelFunc // marks done
	wg      sync.WaitGroup     // readers, writers, heartbeat, the output's copier
}

// Start launches the kernelspec opts.Spec and returns once the kernel has
// answered a kernel_info_request on shell and published on iopub (so that
// no output of a later execution can be lost to a late subscription). It
// gives up after opts.StartTimeout or when ctx is done, and then leaves no
// process, goroutine, socket or file behind. Errors read "start kernel
// NAME: ...".
//
// With opts.Templates in fork mode and a forkable spec, the kernel process
// is forked from the spec's template; when the template cannot serve the
// start (it is down, it failed to fork, or its child died before it was
// ready) the kernel is spawned instead. A spawned kernel that exits because
// another process took one of its ports between the pick and the bind is
// started again, up to three times.
func Start(ctx context.Context, opts Options) (*Kernel, error) {
	if opts.Spec == nil {
		return nil, errors.New("start kernel: no kernelspec given")
	}
	if t := opts.Templates.template(opts.Spec); t != nil {
		k, spawn, err := startForked(ctx, opts, t)
		if !spawn {
			return k, err
		}
	}
	for try := 1; ; try++ {
		k, err := start(ctx, opts, (*Kernel).launch)
		if err == nil || try == 3 || !portClash(err) || ctx.Err() != nil {
			return k, err
		}
	}
}

// portClash reports whether a start failed because another process took
// one of the ports picked for the kernel: the kernel could not bind it, or
// we dialled someone else's socket there. Ports are picked free, but another
// process (another aiod, a test binary) can bind one before the kernel does.
func portClash(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Address already in use") || strings.Contains(s, "not compatible with") ||
		strings.Contains(s, "could not initialize ZMTP connection")
}

// start makes the kernel's connection, has launch start its process, and
// connects.
func start(ctx context.Context, opts Options, launch func(*Kernel) error) (*Kernel, error) {
	opts.setDefaults()
	k, err := newKernel(opts)
	if err != nil {
		return nil, fmt.Errorf("start kernel %s: %w", opts.Spec.Name, err)
	}
	if err := launch(k); err != nil {
		k.sockCancel()
		os.RemoveAll(k.connDir)
		return nil, fmt.Errorf("start kernel %s: %w", opts.Spec.Name, err)
	}
	// The kernel app's own start-up follows: the caller's start slot is
	// given back once it stops keeping a CPU busy, or when it is ready.
	settled := proc.WhenSettled(ctx, k.pid, jupyter.LaunchedHook(ctx))
	err = k.connect(ctx)
	settled()
	if err != nil {
		return nil, fmt.Errorf("start kernel %s: %w", opts.Spec.Name, k.abort(err))
	}
	return k, nil
}

// ID returns the kernel's id, a random UUID.
func (k *Kernel) ID() string { return k.id }

// Session returns the session id written in the headers aiod sends.
func (k *Kernel) Session() string { return k.session }

// Spec returns the kernelspec the kernel was started from.
func (k *Kernel) Spec() *Spec { return k.spec }

// KernelInfo returns the content of the kernel's kernel_info_reply.
func (k *Kernel) KernelInfo() json.RawMessage { return k.info }

// Info describes the kernel for the runtime interface.
func (k *Kernel) Info() jupyter.RuntimeInfo {
	lang := strings.ToLower(k.spec.Language)
	if lang == "" {
		lang = k.infoReply.LanguageInfo.Name
	}
	return jupyter.RuntimeInfo{
		Backend:  "kernel",
		Language: lang,
		Name:     k.spec.Name,
		PID:      k.pid,
		Version:  k.infoReply.LanguageInfo.Version,
	}
}

// Stats counts the messages read from the kernel and dropped.
type Stats struct {
	BadSignature uint64 // signature did not match the key
	Malformed    uint64 // not a Jupyter message
	Pongs        uint64 // heartbeat answers
}

// Stats returns the drop counters.
func (k *Kernel) Stats() Stats {
	return Stats{BadSignature: k.badSig.Load(), Malformed: k.malformed.Load(), Pongs: k.pongs.Load()}
}

// Done is closed when the kernel has been closed or has died, and all its
// resources are released.
func (k *Kernel) Done() <-chan struct{} { return k.done.Done() }

// AfterDone calls f once Done is closed, parking no goroutine till then.
func (k *Kernel) AfterDone(f func()) (stop func() bool) { return context.AfterFunc(k.done, f) }

// Err returns nil while the kernel runs. Once it has ended it returns
// ErrClosed after a Close, or a *jupyter.DeadError when the kernel died first.
func (k *Kernel) Err() error { return k.end.Err() }

// Received counts the bytes read from the kernel's shell and iopub sockets
// so far. It grows while a large message is still arriving, before the
// message is whole: a wait for a message can tell "still coming" from
// "lost".
func (k *Kernel) Received() uint64 { return k.received.Load() }

// stopped reports whether teardown has begun.
func (k *Kernel) stopped() bool { return isClosed(k.stop) }

// isClosed reports whether ch is closed (it is never sent on).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
