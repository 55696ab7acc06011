package term

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }

// screen collects a terminal's output.
type screen struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *screen) add(p []byte) { s.mu.Lock(); s.b.Write(p); s.mu.Unlock() }
func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, s *screen, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q on the screen:\n%s", want, s.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTerminal(t *testing.T) {
	kerneltest.SkipShort(t, "a terminal")
	dir := t.TempDir()
	tm, err := Start(Options{Cwd: dir, Env: []string{"GREETING=hi"}, Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close(context.Background())
	s := &screen{}
	_, detach := tm.Attach(s.add)
	tm.Write([]byte("echo $GREETING-$((6*7)); tty; stty size; pwd\n"))
	waitFor(t, s, "hi-42")
	waitFor(t, s, tm.TTY())
	waitFor(t, s, "30 100")
	waitFor(t, s, dir)
	if !strings.HasPrefix(tm.TTY(), "/dev/pts/") {
		t.Errorf("tty %q", tm.TTY())
	}
	tm.Resize(40, 120)
	tm.Write([]byte("stty size\n"))
	waitFor(t, s, "40 120")

	// Ctrl-C ends the foreground job, not the shell.
	tm.Write([]byte("sh -c 'echo job-$((2+2)); exec sleep 100'; echo not-reached\n"))
	waitFor(t, s, "job-4") // the foreground job runs (the echoed command line says job-$((2+2)))
	tm.Write([]byte{3})
	tm.Write([]byte("echo after-$((1+1))\n"))
	// The job sleeps 100 s, longer than waitFor waits: the shell runs the
	// next command only if Ctrl-C ended the job, and did not go on with
	// the job's own line.
	waitFor(t, s, "after-2")
	if strings.Contains(s.String(), "\nnot-reached") {
		t.Errorf("Ctrl-C went on with the job's line:\n%s", s.String())
	}
	detach()

	// A client that attaches again gets the recent screen.
	s2 := &screen{}
	replay, detach2 := tm.Attach(s2.add)
	defer detach2()
	if !strings.Contains(string(replay), "after-2") {
		t.Errorf("replay lacks the recent output: %q", replay)
	}

	// Close ends the shell and a job it left behind.
	tm.Write([]byte("sleep 300 & echo bg-$((3+3))-$!-pid\n"))
	var m []string
	for deadline := time.Now().Add(20 * time.Second); m == nil; time.Sleep(20 * time.Millisecond) {
		if m = regexp.MustCompile(`bg-6-([0-9]+)-pid`).FindStringSubmatch(s2.String()); m == nil && time.Now().After(deadline) {
			t.Fatalf("no background job's pid on the screen:\n%s", s2)
		}
	}
	job, _ := strconv.Atoi(m[1])
	if err := tm.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tm.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if !kerneltest.Ends(job, 30*time.Second) {
		t.Fatalf("the background job %d outlived Close", job)
	}
}

func TestExitEndsTerminal(t *testing.T) {
	kerneltest.SkipShort(t, "a terminal")
	tm, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close(context.Background())
	tm.Write([]byte("exit 3\n"))
	select {
	case <-tm.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the shell did not end")
	}
	if tm.Err() == nil || tm.Write([]byte("x")) == nil {
		t.Fatalf("err %v", tm.Err())
	}
}

// killSession ends the processes of the terminal's session, but not a new
// session that got the id once the old one was empty: its leader's start
// time is not the shell's.
func TestKillSessionKnowsItsShell(t *testing.T) {
	cmd := exec.Command("sleep", "100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() { cmd.Process.Kill(); <-exited }()
	pid := cmd.Process.Pid
	born, err := procStat(pid, 19)
	if err != nil {
		t.Fatal(err)
	}
	killSession(pid, "1") // a shell that started at another time
	select {
	case <-exited:
		t.Fatal("a new session with the old id was killed")
	case <-time.After(200 * time.Millisecond): // time for a SIGKILL to land: it must not
	}
	killSession(pid, born)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the shell's own session was not killed")
	}
}
