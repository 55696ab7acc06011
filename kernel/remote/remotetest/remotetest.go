// Package remotetest runs a real Jupyter Server (Debian's python3-jupyter-server)
// on loopback for tests, and checks that none of its processes outlives it.
package remotetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// Python is Debian's interpreter, which has jupyter_server 1.23 and
// ipykernel (the python3 on PATH may have neither).
const Python = "/usr/bin/python3"

// Server is a real Jupyter Server run by a test on loopback.
type Server struct {
	t        testing.TB
	URL      string // http://127.0.0.1:PORT
	Token    string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd.Wait returned
	out      *kerneltest.SyncBuffer
	killed   bool  // killed on purpose: its kernels may be orphans
	orphans  []int // descendants recorded before a kill
	stopOnce sync.Once
}

// Start runs `python3 -m jupyter_server` on a free loopback port
// with a random token (or the one extra gives with --ServerApp.token=), waits until GET /api answers, and shuts it down
// politely at cleanup, checking that no process of its tree remains.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Jupyter Server: the fast layer (go test -short) leaves it to make test")
	}
	for try := 1; ; try++ {
		s, err := tryStartJupyter(t, extra...)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		if try == 3 || !strings.Contains(err.Error(), "port") {
			t.Fatalf("start jupyter_server: %v", err)
		}
		t.Logf("start jupyter_server: %v; again", err)
	}
}

func tryStartJupyter(t testing.TB, extra ...string) (*Server, error) {
	dir := t.TempDir()
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	s := &Server{
		t:      t,
		URL:    fmt.Sprintf("http://127.0.0.1:%d", port),
		Token:  hex.EncodeToString(tok),
		exited: make(chan struct{}),
		out:    &kerneltest.SyncBuffer{},
	}
	args := []string{"-m", "jupyter_server"}
	if i := slices.IndexFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--ServerApp.token=") }); i >= 0 {
		s.Token = strings.TrimPrefix(extra[i], "--ServerApp.token=") // a test's own token ("" for none)
	} else {
		args = append(args, "--ServerApp.token="+s.Token)
	}
	args = append(append(args,
		"--ServerApp.port="+strconv.Itoa(port),
		"--ServerApp.port_retries=0",
		"--ServerApp.ip=127.0.0.1",
		"--ServerApp.open_browser=False",
		"--ServerApp.allow_root=True",
		"--ServerApp.root_dir="+dir,
	), extra...)
	s.cmd = exec.Command(Python, args...)
	s.cmd.Dir = dir
	s.cmd.Env = append(os.Environ(),
		"JUPYTER_RUNTIME_DIR="+filepath.Join(dir, ".runtime"),
		"JUPYTER_CONFIG_DIR="+filepath.Join(dir, ".config"),
		"IPYTHONDIR="+filepath.Join(dir, ".ipython"),
		"PYTHONDONTWRITEBYTECODE=1",
	)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	// Readiness is asked with the token, of a route that needs it: another
	// test's server that took the port first (GET /api answers anyone)
	// refuses it.
	probe := s.URL + "/api"
	if s.Token != "" {
		probe = s.URL + "/api/status?token=" + s.Token
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(probe)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("exited before answering (port %d): %s", port, LastLines(s.out.String(), 5))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("GET /api unanswered after 60s: %s", LastLines(s.out.String(), 5))
		}
	}
}

// Kill SIGKILLs the server (not its kernels, which run in their own
// process groups) and waits for it to exit; cleanup then kills the
// kernels it left.
func (s *Server) Kill() {
	s.orphans = kerneltest.Descendants(s.cmd.Process.Pid)
	s.killed = true
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// Stop shuts the server down politely, so that it shuts its kernels down:
// POST /api/shutdown, then SIGINT twice (Jupyter asks to confirm the
// first), then SIGKILL. It then checks that none of the processes the
// server started remains, and kills any that does.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		t := s.t
		procs := s.orphans
		select {
		case <-s.exited:
		default:
			procs = kerneltest.Descendants(s.cmd.Process.Pid)
			s.shutdown()
		}
		if t.Failed() {
			t.Logf("jupyter_server output:\n%s", LastLines(s.out.String(), 40))
		}
		// The server waits for its kernels before it exits; orphans of a
		// killed server are ours to end.
		if s.killed {
			for _, pid := range procs {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			var left []string
			for _, pid := range procs {
				if kerneltest.Alive(pid) {
					left = append(left, fmt.Sprintf("%d (%s)", pid, kerneltest.Cmdline(pid)))
				}
			}
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("processes of jupyter_server left behind: %s", strings.Join(left, ", "))
				for _, pid := range procs {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

func (s *Server) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/api/shutdown", nil)
	req.Header.Set("Authorization", "token "+s.Token)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	cancel()
	steps := []func(){
		func() {},
		func() {
			s.cmd.Process.Signal(syscall.SIGINT)
			time.Sleep(100 * time.Millisecond)
			s.cmd.Process.Signal(syscall.SIGINT)
		},
		func() { syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) },
	}
	// Escalating is not a failure (a loaded machine slows Python's shutdown
	// down); a server that outlives SIGKILL to its group is.
	for i, step := range steps {
		step()
		select {
		case <-s.exited:
			return
		case <-time.After(15 * time.Second):
			if i == len(steps)-1 {
				s.t.Errorf("jupyter_server still running 15 s after SIGKILL to its process group")
			} else {
				s.t.Logf("jupyter_server still running 15 s after shutdown step %d; escalating", i+1)
			}
		}
	}
	<-s.exited
}

// ClosedPort returns a port of 127.0.0.1 that refuses connections until t
// ends: a socket bound to it and never listening holds it, so no other
// test's server can take it meanwhile.
func ClosedPort(t testing.TB) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}

// FreePort returns a port that was free on 127.0.0.1 a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Output is what the server printed so far.
func (s *Server) Output() string { return s.out.String() }

// Pid is the server process's pid.
func (s *Server) Pid() int { return s.cmd.Process.Pid }
