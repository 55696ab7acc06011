package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockStateDir makes the state directory (mode 0700) and takes its lock,
// so that two daemons never share one: the tenants' uids and folders
// there belong to one aiod at a time. The lock ends with the process.
func lockStateDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &usageError{fmt.Sprintf("--state-dir %q: %v; give a folder aiod can create and write", dir, err)}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, &usageError{fmt.Sprintf("--state-dir %q: %v", dir, err)}
	}
	path := filepath.Join(dir, "aiod.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("--state-dir %q: %v", dir, err)}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "another process"
		} else {
			holder = "aiod pid " + holder
		}
		return nil, &usageError{fmt.Sprintf("--state-dir %q is in use by %s; give each daemon its own state directory", dir, holder)}
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}
