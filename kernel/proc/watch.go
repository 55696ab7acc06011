package proc

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Pidfd returns a pollable pidfd of pid, or nil when the system has none
// (Linux before 5.3) or the process is already gone.
func Pidfd(pid int) *os.File {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid))
}

// WaitPidfd returns when the process of pidfd has exited or pidfd is
// closed. It waits in Go's poller, so no thread is held per process.
func WaitPidfd(pidfd *os.File) {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool { //nolint:errcheck // a closed pidfd ends the wait too
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err != nil && !errors.Is(err, unix.EINTR) || n > 0
	})
}

// SignalGroup sends sig to the process group of pid. A process that has
// not made its group yet (a forked kernel makes it with setsid once it
// runs) gets sig itself, unless reaped says it is gone: its pid may be
// another process's by now.
func SignalGroup(pid int, sig syscall.Signal, reaped func() bool) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) && !reaped() {
		err = syscall.Kill(pid, sig)
	}
	return err
}

// Admit puts the process pid, waiting at g, under its limits with admit and
// lets it go; a nil admit lets it go at once. When admit fails the gate is
// shut (the process exits before it runs anything) and admit's error is
// returned.
func (g *Gate) Admit(pid int, admit func(pid int) error) error {
	if admit == nil {
		return g.Open()
	}
	if err := admit(pid); err != nil {
		g.Shut()
		return err
	}
	return g.Open()
}
