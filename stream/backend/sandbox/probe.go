package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Probe says why tenant sandboxes cannot be made on this machine, or nil
// when they can: it runs the whole plan of a runtime (namespaces, a
// network namespace of its own, the read-only view, a tenant's folders,
// uid, no_new_privs, the filter) in a throwaway process, in a scratch
// folder under dir. It takes a few milliseconds.
func Probe(dir string, uid uint32) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("aiod runs as uid %d, and only root can make the namespaces and switch to tenant uids", os.Geteuid())
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	scratch, err := os.MkdirTemp(dir, "probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	v := View{HomePath: HomePath, UID: uid, GID: uid, Net: -1}
	for _, f := range []*string{&v.Home, &v.Tmp} {
		*f, err = os.MkdirTemp(scratch, "f-")
		if err != nil {
			return err
		}
	}
	if v.Seccomp, err = Filter(); err != nil {
		return err
	}
	p := v.FilesPlan() // its own network namespace, no descriptor to pass
	p.LoUp = true
	cmd := exec.Command("/probe")
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	wrapAs(cmd, modeProbe, p, nil, nil)
	cmd.WaitDelay = time.Second
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start a sandbox probe: %w", err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		err = <-done
		err = errors.Join(errors.New("no answer within 10 s"), err)
	}
	if err != nil {
		return fmt.Errorf("a sandbox probe failed: %v: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}
