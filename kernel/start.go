package kernel

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/bufconn"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/proc"
)

const (
	// dialRetry is the pause between two dial attempts while the kernel
	// has not bound its ports yet. Dialing retries without limit; Start's
	// timeout bounds it (zmq4's default gives up after 2.5 s).
	dialRetry = 100 * time.Millisecond
	// dialRetryIPC is dialRetry for Unix sockets: a refused dial costs
	// one syscall, and a forked kernel binds within tens of milliseconds.
	dialRetryIPC = 10 * time.Millisecond
	// infoRetry is the pause between two kernel_info_requests of the
	// readiness handshake.
	infoRetry = 200 * time.Millisecond
)

// newKernel writes the connection file and makes the (undialed) sockets.
func newKernel(opts Options) (*Kernel, error) {
	dir, err := makeConnectionDir(opts.ConnDir)
	if err != nil {
		return nil, err
	}
	var conf *Confinement
	if opts.Confine != nil {
		if conf, err = opts.Confine(dir); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("confine: %w", err)
		}
	}
	view, owner := dir, opts.Credential
	if conf != nil && conf.View != "" {
		view = conf.View
	}
	if conf != nil && conf.Owner != nil {
		owner = conf.Owner
	}
	conn, file, err := newConnection(opts.Spec.Name, opts.Transport, opts.Spec, dir, view, conf != nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if c := owner; c != nil {
		// The kernel reads its connection file and binds its ipc sockets
		// in the folder: both become its user's.
		for _, p := range []string{dir, file} {
			if err := os.Chown(p, int(c.Uid), int(c.Gid)); err != nil {
				os.RemoveAll(dir)
				return nil, fmt.Errorf("hand the connection folder to uid %d: %w", c.Uid, err)
			}
		}
	}
	k := &Kernel{
		id:        jupyter.NewID(),
		session:   jupyter.NewID(),
		spec:      opts.Spec,
		opts:      opts,
		log:       opts.Logger.With("kernel", opts.Spec.Name),
		conn:      conn,
		signer:    newSigner([]byte(conn.Key)),
		connDir:   dir,
		viewDir:   view,
		conf:      conf,
		iopubSeen: make(chan struct{}),
		hbWake:    make(chan struct{}, 1),
		started:   make(chan struct{}),
		stop:      make(chan struct{}),
		outDone:   make(chan struct{}),
	}
	k.done, k.over = context.WithCancel(context.Background())
	k.log = k.log.With("id", k.id)
	k.output = &proc.Output{Log: k.log}
	k.sockCtx, k.sockCancel = context.WithCancel(context.Background())
	k.exitCtx, k.exitCancel = context.WithCancel(context.Background())
	k.makeChannels()
	return k, nil
}

// makeChannels creates the five sockets. shell, control and stdin share one
// routing identity: ipykernel sends input_request on stdin to the identity
// that sent the execute_request on shell. shell and iopub, which every
// execution reads from, read through a buffer.
func (k *Kernel) makeChannels() {
	retry := dialRetry
	if k.conn.Transport == TransportIPC {
		retry = dialRetryIPC
	}
	c, wt := k.conn, k.opts.SendTimeout
	k.shell = newChannel("shell", newZsock(zmq4.Dealer, k.session, &k.received, retry, wt), c.ShellPort)
	k.control = newChannel("control", newZsock(zmq4.Dealer, k.session, nil, retry, wt), c.ControlPort)
	k.stdin = newChannel("stdin", newZsock(zmq4.Dealer, k.session, nil, retry, wt), c.StdinPort)
	k.iopub = newChannel("iopub", newZsock(zmq4.Sub, "", &k.received, retry, wt), c.IOPubPort)
	k.hb = newChannel("hb", newZsock(zmq4.Dealer, "", nil, retry, wt), c.HBPort)
	k.channels = []*channel{k.iopub, k.shell, k.control, k.stdin, k.hb}
}

// launch starts the kernel process in its own process group, and the
// goroutines that wait for it and supervise the kernel's end.
func (k *Kernel) launch() error {
	argv, patches := k.spec.spawned(k.spec.command(k.viewDir + "/kernel.json"))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = k.opts.Cwd
	cmd.Env = k.environ()
	if patches != "" {
		cmd.Env = append(cmd.Env, patches)
	}
	// proc.Start adds a parent-death signal (JPY_PARENT_PID: a second).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: k.opts.Credential}
	var wrap func(*exec.Cmd) // a confined kernel's wrapper, in front of its gate
	if k.conf != nil {
		wrap = k.conf.Wrap
	}
	// Our own pipe rather than exec's: exec's Wait would also wait for
	// every process still holding the pipe (the kernel's children), and
	// those are only killed once the kernel's exit is known.
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("launch %s: make output pipe: %w", argv[0], err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = proc.Start(cmd, wrap, k.opts.Admit)
	w.Close()
	if err != nil {
		r.Close()
		return fmt.Errorf("launch %s: %w", argv[0], err)
	}
	k.mode = StartSpawn
	k.watch(cmd.Process.Pid, r, func() *jupyter.DeadError {
		err := cmd.Wait()
		var st syscall.WaitStatus
		if ps := cmd.ProcessState; ps != nil {
			st, _ = ps.Sys().(syscall.WaitStatus)
		}
		return deadFromExit(st, err)
	})
	k.log.Debug("kernel launched", "argv", argv)
	return nil
}

// environ is the kernel process's environment: Options.Environ (aiod's own
// when nil), JPY_PARENT_PID, the spec's env, then Options.Env; later entries
// win. JPY_PARENT_PID makes ipykernel exit on its own if it is orphaned (it
// polls for that).
func (k *Kernel) environ() []string {
	env := append(baseEnviron(k.opts.Environ), "JPY_PARENT_PID="+strconv.Itoa(os.Getpid()))
	env = append(env, k.spec.environ(env)...)
	return append(env, k.opts.Env...)
}

// baseEnviron is env, or aiod's own environment when env is nil.
func baseEnviron(env []string) []string {
	if env == nil {
		return os.Environ()
	}
	return append([]string(nil), env...)
}

// watch records the launched kernel process pid, whose stdout and stderr
// arrive on out, and starts the goroutines that copy its output, wait for
// its exit (waitExit, called once) and supervise the kernel's end.
func (k *Kernel) watch(pid int, out *os.File, waitExit func() *jupyter.DeadError) {
	k.pid, k.outPipe, k.outCopy, k.waitExit = pid, out, bufconn.NewPipe(out), waitExit
	k.log = k.log.With("pid", k.pid)
	k.wg.Add(1)
	go k.copyOutput()
	go k.wait()
}

// copyOutput copies the kernel's stdout and stderr to k.output until every
// holder of the pipe is gone or teardown closes it.
func (k *Kernel) copyOutput() {
	defer k.wg.Done()
	defer close(k.outDone)
	if err := k.outCopy.Copy(k.output); err != nil && !isClosed(k.stop) {
		k.log.Debug("read kernel output failed", "err", err)
	}
}

// connect dials the sockets and runs the readiness handshake, bounded by
// StartTimeout (up to three times it while the kernel waits for a CPU) and ctx. If the process exits or the time runs out, the
// sockets are cancelled and the process group is killed so that no step
// of connect can stay blocked.
func (k *Kernel) connect(ctx context.Context) error {
	ctx, cancel := proc.WithStarvedTimeout(ctx, k.pid, k.opts.StartTimeout, starvedTimeouts*k.opts.StartTimeout/4,
		fmt.Errorf("%w within %s", errNotReady, k.opts.StartTimeout))
	defer cancel()
	stopOnExit := context.AfterFunc(k.exitCtx, cancel)
	defer stopOnExit()
	stopWatchdog := context.AfterFunc(ctx, func() {
		k.sockCancel()
		k.killGroup(syscall.SIGKILL)
	})
	defer close(k.started)
	err := k.dialAll()
	if err == nil {
		err = k.handshake(ctx)
	}
	if !stopWatchdog() && err == nil {
		err = context.Cause(ctx)
	}
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return err
}

// dialAll connects every socket and starts its reader. iopub goes first
// so its subscription is in place as early as possible.
func (k *Kernel) dialAll() error {
	for _, c := range k.channels {
		network, addr := k.conn.address(c.port)
		if err := c.sock.dial(k.sockCtx, network, addr); err != nil {
			return fmt.Errorf("dial %s: %w", c.name, err)
		}
		c.reading = true
		k.wg.Add(1)
		go k.readLoop(c)
	}
	return nil
}

// handshake sends kernel_info_request every infoRetry until a
// kernel_info_reply has come back on shell and some message has come on
// iopub (proving the subscription is live: the slow-joiner problem). The
// handshake's messages never reach the Handler.
func (k *Kernel) handshake(ctx context.Context) error {
	replies := make(chan *jupyter.Message, 64)
	var ids []string
	defer func() { k.replies.Forget(ids...) }()
	tick := time.NewTicker(infoRetry)
	defer tick.Stop()
	iopubSeen := k.iopubSeen
	for {
		id := jupyter.NewID()
		ids = append(ids, id)
		k.replies.Expect(id, replies)
		req := &jupyter.Message{Channel: "shell", Header: jupyter.NewHeader(k.session, id, "kernel_info_request")}
		if err := k.send(ctx, k.shell, req); err != nil {
			return fmt.Errorf("send kernel_info_request: %w", err)
		}
		for wait := true; wait; {
			select {
			case m := <-replies:
				if m.Channel == "shell" && m.Header.MsgType == "kernel_info_reply" && k.info == nil {
					k.info = m.Content
				}
			case <-iopubSeen:
				iopubSeen = nil
			case <-tick.C:
				wait = false
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if k.info != nil && iopubSeen == nil {
				return k.becomeReady()
			}
		}
	}
}

// becomeReady parses the kernel_info_reply and opens the gate to Handler.
func (k *Kernel) becomeReady() error {
	if err := json.Unmarshal(k.info, &k.infoReply); err != nil {
		return fmt.Errorf("decode kernel_info_reply: %w", err)
	}
	k.ready.Store(true)
	k.wg.Add(1)
	go k.heartbeat()
	k.log.Debug("kernel ready", "version", k.infoReply.LanguageInfo.Version)
	return nil
}

// abort ends a kernel whose start failed and returns the error to report:
// when the process died, its death and the tail of its output explain
// more than the step that noticed.
func (k *Kernel) abort(err error) error {
	k.end.Set(err)
	k.killGroup(syscall.SIGKILL)
	<-k.done.Done()
	var dead *jupyter.DeadError
	if k.exitErr != nil && k.exitErr.Signal != "SIGKILL" {
		dead = k.exitErr
	}
	if dead == nil {
		return err
	}
	if dead.Output != "" {
		return fmt.Errorf("%w: %s", dead, lastLine(dead.Output))
	}
	return dead
}
