package sandbox

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// ownedDir never changes what a link planted in its place points at.
func TestOwnedDirRefusesALink(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "work")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := ownedDir(link, 0o700, 4242); err == nil {
		t.Fatal("ownedDir went through a link")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(target, &st); err != nil || st.Mode&0o777 != 0o755 || st.Uid != uint32(os.Getuid()) {
		t.Fatalf("the link's target changed: mode %o uid %d (%v)", st.Mode&0o777, st.Uid, err)
	}
	dir := filepath.Join(base, "plain")
	if err := ownedDir(dir, 0o700, 4242); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(dir, &st); err != nil || st.Mode&0o777 != 0o700 || st.Uid != 4242 {
		t.Fatalf("a plain folder: mode %o uid %d (%v)", st.Mode&0o777, st.Uid, err)
	}
}

// startAs runs sleep as uid until the test ends; done is closed once it has
// exited.
func startAs(t *testing.T, uid uint32) (pid int, done <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	go func() { _ = cmd.Wait(); close(ch) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-ch })
	return cmd.Process.Pid, ch
}

// A uid that some process runs as is never given to a new tenant: that
// process (left by anyone) would see the tenant's files and processes.
func TestUIDOfALiveProcessIsNotGiven(t *testing.T) {
	ts, _ := newTenants(t, NetworkNone)
	first, _ := ts.UIDRange()
	startAs(t, first)
	alice, err := ts.Get("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	if alice.UID == first {
		t.Fatalf("alice got uid %d, which a live process runs as", first)
	}
}

// A process of a tenant's uid left behind when its daemon stopped (a crash,
// a process outside every cgroup) is killed when a daemon starts on the
// same state directory, before the tenant's uid serves again.
func TestLeftoversOfATenantAreKilledAtStart(t *testing.T) {
	ts, work := newTenants(t, NetworkNone)
	alice, err := ts.Get("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	pid, gone := startAs(t, alice.UID)
	// The daemon dies (a crash: no Close kills what it left); its uid
	// range's lock goes with it.
	ts.stopReleasing()
	ts.mu.Lock()
	giveBack := ts.release
	ts.release = nil
	ts.mu.Unlock()
	giveBack()
	t.Cleanup(func() { _ = ts.Close() })
	first, last := ts.UIDRange()
	ts2, err := NewTenants(Config{StateDir: ts.cfg.StateDir, FirstUID: first, LastUID: last, Workdir: work})
	if err != nil {
		t.Fatal(err)
	}
	defer ts2.Close()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatalf("alice's leftover process %d still runs after a daemon started on her state directory", pid)
	}
}

// Nothing that runs as a tenant outlives aiod's stop: a process in a
// session of its own and a crowd of children started in a loop, none of
// them in a runtime's cgroup (as under the rlimit fallback), are gone
// when Close returns.
func TestNothingOfATenantOutlivesClose(t *testing.T) {
	ts, _ := newTenants(t, NetworkNone)
	alice, err := ts.Get("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := ts.Get("jwt:bob")
	if err != nil {
		t.Fatal(err)
	}
	loner, _ := startAs(t, alice.UID)
	crowd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200 ]; do setsid sleep 600 & i=$((i+1)); done; echo started; wait")
	crowd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: bob.UID, Gid: bob.UID}}
	out, err := crowd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := crowd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _ = crowd.Wait(); close(waited) }()
	t.Cleanup(func() { _ = crowd.Process.Kill(); <-waited })
	line := make([]byte, 8)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "started\n" {
		t.Fatalf("the crowd did not start: %q %v", line, err)
	}
	before := processesOf(func(uid uint32) bool { return uid == alice.UID || uid == bob.UID })
	if len(before[alice.UID]) != 1 || before[alice.UID][0] != loner || len(before[bob.UID]) < 201 {
		t.Fatalf("before the stop: alice runs %v (want [%d]), bob %d processes (want 201)", before[alice.UID], loner, len(before[bob.UID]))
	}
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	if left := processesOf(func(uid uint32) bool { return uid == alice.UID || uid == bob.UID }); len(left) != 0 {
		t.Fatalf("after Close, processes of the tenants' uids still run: %v", left)
	}
}

// A tenant being made does not hold up the others: while bob's sandbox is
// being made (held in the hook), alice's is made and served; a second Get
// of bob's waits for the first and gets the same tenant.
func TestTenantMadeWithoutHoldingOthers(t *testing.T) {
	ts, _ := newTenants(t, NetworkNone)
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	testHookMake = func(key string) {
		if key == "jwt:bob" {
			held <- struct{}{}
			<-hold
		}
	}
	t.Cleanup(func() { testHookMake = func(string) {} })
	type got struct {
		t   *Tenant
		err error
	}
	bobs := make(chan got, 2)
	go func() { b, err := ts.Get("jwt:bob"); bobs <- got{b, err} }()
	<-held
	go func() { b, err := ts.Get("jwt:bob"); bobs <- got{b, err} }()
	alice, err := ts.Get("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	close(hold)
	b1, b2 := <-bobs, <-bobs
	if b1.err != nil || b2.err != nil || b1.t != b2.t || b1.t == nil {
		t.Fatalf("bob's two Gets: %+v %+v", b1, b2)
	}
	if alice.UID == b1.t.UID {
		t.Fatalf("alice and bob share uid %d", alice.UID)
	}
}
