package proc

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestReadProcessAndDescendants: a process's row reads its own figures,
// and Descendants finds a shell's child and stops at what is not below.
func TestReadProcessAndDescendants(t *testing.T) {
	me, err := ReadProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	me.ReadDetails()
	if me.UID != uint32(os.Getuid()) || me.PPID != os.Getppid() || me.RSSBytes <= 0 || me.Threads < 1 || me.FDs < 3 || me.Started <= 0 || me.State == "" {
		t.Errorf("own row: %+v", me)
	}
	sh := exec.Command("sh", "-c", "sleep 60 & wait")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Process.Kill(); _ = sh.Wait() }()
	var under []int
	for deadline := time.Now().Add(30 * time.Second); len(under) < 2; time.Sleep(10 * time.Millisecond) {
		under = Descendants([]int{sh.Process.Pid})
		if time.Now().After(deadline) {
			t.Fatalf("the shell's child never showed: %v", under)
		}
	}
	child, err := ReadProcess(under[1])
	if err != nil || child.PPID != sh.Process.Pid || under[0] != sh.Process.Pid {
		t.Fatalf("descendants %v: child %+v (%v)", under, child, err)
	}
	if slices.Contains(under, os.Getpid()) || Descendants(nil) != nil {
		t.Errorf("descendants reach above the root: %v", under)
	}
	if _, err := ReadProcess(1 << 30); err == nil {
		t.Error("a process that does not exist was read")
	}
}
