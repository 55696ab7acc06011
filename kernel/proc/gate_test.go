package proc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartHoldsTheProgramUntilAdmitted starts a program that writes a
// file: while admit runs, the process is the gate's shell and the file is
// not there; after, the program ran with its arguments, descriptors and pid.
func TestStartHoldsTheProgramUntilAdmitted(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(dir, "ran")
	extra, err := os.CreateTemp(dir, "extra")
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	// The program writes its pid, its first argument, what its descriptor 3
	// is and whether a descriptor 4 (the gate's) is open into the mark.
	cmd := exec.Command("/bin/sh", "-c", `if [ -e /proc/self/fd/4 ]; then g=open; else g=closed; fi
echo "$$ $1 $(readlink /proc/self/fd/3) $g" > "$2"`, "prog", "first", mark)
	cmd.ExtraFiles = []*os.File{extra}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var held string
	err = Start(cmd, nil, func(pid int) error {
		// exec closes the start pipe (and Start returns) before the kernel
		// sets the new program's arguments: cmdline reads empty until then.
		for deadline := time.Now().Add(10 * time.Second); held == "" && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			args, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			held = strings.ReplaceAll(string(args), "\x00", " ")
		}
		if _, err := os.Stat(mark); err == nil {
			t.Error("the program ran before it was admitted")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(held, "aiod-gate -c ") {
		t.Errorf("while admitted the process was %q, want the gate", held)
	}
	got, err := os.ReadFile(mark)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(got))
	if len(f) != 4 || f[0] != strconv.Itoa(cmd.Process.Pid) || f[1] != "first" || f[2] != extra.Name() || f[3] != "closed" {
		t.Errorf("the program saw %q; want pid %d, arg first, fd 3 %s, and the gate's descriptor closed", got, cmd.Process.Pid, extra.Name())
	}
}

// TestStartRefusedNeverRunsTheProgram: an admit that fails leaves the
// program unrun and the process reaped.
func TestStartRefusedNeverRunsTheProgram(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "ran")
	cmd := exec.Command("/bin/touch", mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	refused := errors.New("no room")
	if err := Start(cmd, nil, func(int) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("Start: %v, want the admit's error", err)
	}
	if cmd.ProcessState == nil {
		t.Error("the refused process was not reaped")
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the refused program ran")
	}
}

// TestShutEndsTheHeldProcess: a gate shut without a line ends the process
// with ExitShut before its program runs.
func TestShutEndsTheHeldProcess(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "ran")
	cmd := exec.Command("/bin/touch", mark)
	g, err := Hold(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g.Started()
	g.Shut()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitShut {
		t.Errorf("exit %v, want %d", err, ExitShut)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the program ran")
	}
}
