package kernel

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/proc"
)

// shutdownGrace is how long Close waits after shutdown_request, and again
// after SIGTERM, before escalating (a variable for tests).
var shutdownGrace = 2 * time.Second

const (
	// replyGrace is how long Close waits for the exit of a kernel that
	// has answered shutdown_request: a clean one exits within 0.1 s, but
	// ipykernel 6.17 deadlocks in its teardown in about one close in 15
	// (its control thread publishes through the stopped iopub thread while
	// the main thread joins it), which only a signal ends.
	replyGrace = 500 * time.Millisecond
	// eofGrace bounds how long teardown waits for the readers to see the
	// dead process's connections close before closing the sockets.
	eofGrace = time.Second
	// outputDrain bounds how long a dead kernel's last output is waited
	// for: the copier is behind only while it waits for a CPU.
	outputDrain = 5 * time.Second
)

// wait is the only caller of waitExit (cmd.Wait for a spawned kernel, the
// template's report for a forked one). It records how the process ended,
// marks the exit on exitCtx and turns it, whatever caused it, into the end
// of the Kernel. It is not in wg: it waits for wg.
func (k *Kernel) wait() {
	d := k.waitExit()
	k.awaitOutput()
	d.Output = k.output.String()
	k.exitErr = d
	k.log.Debug("kernel process ended", "cause", d.Cause)
	k.exitCancel()
	<-k.started
	k.end.Set(k.exitErr) // no-op when Close, the heartbeat or Start set a cause
	k.teardown()
}

// awaitOutput waits, at most outputDrain, until the copier has passed on
// what the dead kernel's pipe holds: its last lines often explain the
// death. Children of the kernel may still hold the pipe's write end, so
// this waits for the copier to catch up, not for the pipe's end.
func (k *Kernel) awaitOutput() {
	drain := time.NewTimer(outputDrain)
	defer drain.Stop()
	for !k.outCopy.CaughtUp() {
		select {
		case <-k.outCopy.Parked():
		case <-k.outDone:
			return
		case <-drain.C:
			return
		}
	}
}

// teardown releases everything once the process has exited: the rest of
// its process group, the goroutines, the sockets and the connection file.
func (k *Kernel) teardown() {
	k.killGroup(syscall.SIGKILL) // leftovers of the kernel's group
	close(k.stop)
	// Let each reader take the EOF of its dead connection first: a zmq4
	// connection goroutine blocked on an unread message would leak.
	grace, cancel := context.WithTimeout(context.Background(), eofGrace)
	defer cancel()
	select { // the rest of the output, unless something still holds the pipe
	case <-k.outDone:
	case <-grace.Done():
	}
	k.outPipe.Close()
	for _, c := range k.channels {
		if !c.reading {
			continue
		}
		select {
		case <-c.eof:
		case <-grace.Done():
		}
	}
	k.sockCancel()
	for _, c := range k.channels {
		c.sock.close()
	}
	k.wg.Wait()
	removeAll(k.connDir, k.log)
	k.log.Debug("kernel ended", "err", k.Err())
	k.over()
}

// Close shuts the kernel down and releases all it holds: shutdown_request
// on control, then SIGTERM to its process group after a grace period, then
// SIGKILL after another; it then waits for its goroutines and removes the
// connection file. ctx cuts the polite steps short (straight to SIGKILL);
// the rest is bounded and always completes. Close is idempotent and safe
// to call after the kernel died; it returns nil.
func (k *Kernel) Close(ctx context.Context) error {
	if k.closing.CompareAndSwap(false, true) {
		k.end.Set(ErrClosed)
		k.stopProcess(ctx)
	}
	<-k.done.Done()
	return nil
}

// stopProcess makes the kernel process exit, politely if it can.
func (k *Kernel) stopProcess(ctx context.Context) {
	if k.exited() {
		return
	}
	id, replies := k.requestShutdown(ctx)
	defer k.replies.Forget(id)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if k.awaitExit(ctx, replies) {
			return
		}
		replies = nil
		k.killGroup(sig)
	}
}

// awaitExit waits up to shutdownGrace for the process to exit, or until
// ctx ends; once replies brings a shutdown_reply, up to replyGrace from
// then. It reports whether the process exited.
func (k *Kernel) awaitExit(ctx context.Context, replies <-chan *jupyter.Message) bool {
	t := time.NewTimer(shutdownGrace)
	defer t.Stop()
	for {
		select {
		case <-k.exitCtx.Done():
		case <-ctx.Done():
		case <-t.C:
		case m := <-replies:
			if m.Header.MsgType == "shutdown_reply" {
				t.Reset(replyGrace)
				replies = nil
			}
			continue
		}
		return k.exited()
	}
}

// requestShutdown sends shutdown_request on control and returns its id and
// the channel its replies come on. The kernel answers and exits; the reply
// only shortens the wait, the process's exit is what counts.
func (k *Kernel) requestShutdown(ctx context.Context) (string, chan *jupyter.Message) {
	ctx, cancel := context.WithTimeout(ctx, shutdownGrace)
	defer cancel()
	id, ch := jupyter.NewID(), make(chan *jupyter.Message, 4)
	k.replies.Expect(id, ch)
	m := &jupyter.Message{Channel: "control", Header: jupyter.NewHeader(k.session, id, "shutdown_request"), Content: []byte(`{"restart":false}`)}
	if err := k.send(ctx, k.control, m); err != nil {
		k.log.Debug("send shutdown_request failed", "err", err)
	}
	return id, ch
}

func (k *Kernel) exited() bool { return k.exitCtx.Err() != nil }

// killGroup sends sig to the kernel's process group. A forked kernel makes
// that group (setsid) only once it runs, after the template reported it:
// until then sig goes to its pid, or a start cancelled at once left it
// running and waited for its end for ever. Gone is not an error.
func (k *Kernel) killGroup(sig syscall.Signal) {
	if err := proc.SignalGroup(k.pid, sig, k.exited); err != nil && !errors.Is(err, syscall.ESRCH) {
		k.log.Debug("signal process group failed", "signal", jupyter.SignalName(sig), "err", err)
	}
}

// Interrupt asks the kernel to stop the code it runs (Python sees a
// KeyboardInterrupt) and keep its state. For interrupt_mode "signal" it
// sends SIGINT to the kernel's process group; for "message" it sends
// interrupt_request on control and waits for interrupt_reply until ctx
// ends. A kernel that runs nothing ignores the interrupt.
func (k *Kernel) Interrupt(ctx context.Context) error {
	if k.stopped() || k.exited() {
		return fmt.Errorf("interrupt kernel: %w", k.endErr())
	}
	if k.spec.InterruptMode != InterruptMessage {
		if err := proc.SignalGroup(k.pid, syscall.SIGINT, k.exited); err != nil {
			return fmt.Errorf("interrupt kernel: signal process group %d: %w", k.pid, err)
		}
		return nil
	}
	if err := k.interruptByMessage(ctx); err != nil {
		return fmt.Errorf("interrupt kernel: %w", err)
	}
	return nil
}

func (k *Kernel) interruptByMessage(ctx context.Context) error {
	id := jupyter.NewID()
	replies := make(chan *jupyter.Message, 8)
	k.replies.Expect(id, replies)
	defer k.replies.Forget(id)
	m := &jupyter.Message{Channel: jupyter.Control, Header: jupyter.NewHeader(k.session, id, jupyter.MsgInterruptRequest)}
	if err := k.send(ctx, k.control, m); err != nil {
		return fmt.Errorf("send interrupt_request: %w", err)
	}
	_, err := jupyter.Await(ctx, replies, jupyter.MsgInterruptReply, k.stop, k.Err)
	return err
}

// endErr is Err, or a description of the exit when teardown has not
// recorded a cause yet.
func (k *Kernel) endErr() error {
	if err := k.Err(); err != nil {
		return err
	}
	if k.exited() {
		return k.exitErr
	}
	return ErrClosed
}

// starvedTimeouts bounds the wait for a ping while a CPU is what the
// kernel, or aiod, waits for (a minute at the defaults).
const starvedTimeouts = 12

// heartbeat pings the kernel on the hb socket every HeartbeatInterval
// while it is in use (the reader notes each answer). A ping unanswered for
// HeartbeatTimeout declares the kernel dead and kills its group, unless
// the kernel (proc.Starvation) or this goroutine's ticks waited for a CPU
// a quarter of that time: then up to starvedTimeouts timeouts.
// Once the kernel is idle (Options.IdleAfter) and its last ping answered,
// the heartbeat sleeps until a message to or from the kernel wakes it.
func (k *Kernel) heartbeat() {
	defer k.wg.Done()
	t := time.NewTimer(k.opts.HeartbeatInterval)
	defer t.Stop()
	ping := [][]byte{{}, []byte("ping")}
	var pinged int64 // unix nanoseconds of the oldest unanswered ping; 0: none
	var starve proc.Starvation
	waitedCPU := false // the unanswered ping's wait was extended for a CPU
	// late sums how late this goroutine's ticks came while the ping waits:
	// when aiod itself waits for a CPU (or its goroutines for a thread),
	// the pong may sit unread, and that is no fault of the kernel's.
	var late time.Duration
	due := time.Now().Add(k.opts.HeartbeatInterval)
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
		}
		if pinged != 0 {
			late += max(time.Since(due), 0)
		}
		now := time.Now().UnixNano()
		if pinged != 0 && k.lastPong.Load() >= pinged {
			pinged, waitedCPU, late = 0, false, 0
			starve.Reset()
		}
		silent := time.Duration(now - pinged)
		if pinged != 0 && silent >= k.opts.HeartbeatInterval && !starve.Marked() {
			starve.Mark(k.pid, time.Now())
		}
		// A kernel whose threads stand in the run queue is slow, not dead:
		// it gets up to starvedTimeouts timeouts before it is given up.
		if pinged != 0 && silent > k.opts.HeartbeatTimeout {
			starved := starve.Starved(k.pid, time.Now()) || 4*late >= silent-k.opts.HeartbeatInterval
			if starved && silent <= starvedTimeouts*k.opts.HeartbeatTimeout {
				waitedCPU = true
				t.Reset(k.opts.HeartbeatInterval)
				due = time.Now().Add(k.opts.HeartbeatInterval)
				continue
			}
			k.log.Debug("heartbeat lost", "silent", silent, "starved", starved)
			d := deadFromHeartbeat(k.opts.HeartbeatTimeout)
			if waitedCPU {
				d = deadFromHeartbeat(silent)
			}
			d.Output = k.output.String()
			k.end.Set(d)
			k.killGroup(syscall.SIGKILL)
			return
		}
		if pinged == 0 && k.idle() {
			select {
			case <-k.stop:
				return
			case <-k.hbWake:
			}
			now = time.Now().UnixNano()
		}
		if pinged == 0 {
			pinged = now
		}
		// Never wait on a stuck writer: the timeout above still counts.
		if _, err := k.hb.sock.trySend(ping); err != nil && k.sockCtx.Err() == nil {
			k.log.Debug("heartbeat send failed", "err", err)
		}
		t.Reset(k.opts.HeartbeatInterval)
		due = time.Now().Add(k.opts.HeartbeatInterval)
	}
}

// idle says whether the kernel is idle, and if so marks the heartbeat
// asleep: used then wakes it. The mark is set before the second look, and
// used writes lastUsed before it reads the mark, so one of them sees the
// other.
func (k *Kernel) idle() bool {
	quiet := func() bool {
		return k.awaiting.Load() <= 0 && time.Duration(time.Now().UnixNano()-k.lastUsed.Load()) > k.opts.IdleAfter
	}
	if !quiet() {
		return false
	}
	k.hbIdle.Store(true)
	if quiet() {
		return true
	}
	if !k.hbIdle.CompareAndSwap(true, false) {
		<-k.hbWake // used took the mark and signalled: take the signal back
	}
	return false
}

// used notes a message to or from the kernel (heartbeats aside) and wakes
// a sleeping heartbeat.
func (k *Kernel) used() {
	k.lastUsed.Store(time.Now().UnixNano())
	if k.hbIdle.Load() && k.hbIdle.CompareAndSwap(true, false) {
		k.hbWake <- struct{}{} // buffered (1): the heartbeat takes it before it can sleep again
	}
}
