package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// kernelStartInfo is /v2/code/info's kernel_start.
type kernelStartInfo struct {
	Mode      string `json:"mode"`
	Templates []struct {
		Kernelspec  string `json:"kernelspec"`
		State       string `json:"state"`
		PID         int    `json:"pid"`
		PSSBytes    int64  `json:"pss_bytes"`
		Starts      uint64 `json:"starts"`
		LiveKernels int    `json:"live_kernels"`
		HotPages    int    `json:"hot_pages"`
		HotError    string `json:"hot_error"`
	} `json:"templates"`
}

func (d *daemon) kernelStart(ctx context.Context) kernelStartInfo {
	d.t.Helper()
	var env envelope[struct {
		KernelStart kernelStartInfo `json:"kernel_start"`
	}]
	d.do(ctx, http.MethodGet, "/v2/code/info", nil, &env)
	return env.Data.KernelStart
}

// exists reports whether pid is in /proc, zombie or not.
func exists(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// ppid reads a process's parent pid from /proc.
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// TestDefaultStartIsFork checks that, with no setting, a session's kernel
// is forked from the default kernelspec's template, that discovery says
// so, and that the session works; then that killing the daemon with
// SIGKILL takes the template and the kernel with it.
func TestDefaultStartIsFork(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--code-backend", "kernel")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	out := d.execute(ctx, "s1", "x = 6 * 7\nprint(x)", 60)
	if out.Stdout != "42\n" {
		t.Fatalf("stdout %q", out.Stdout)
	}
	if out := d.execute(ctx, "s1", "import os; print(os.getpid())", 60); strings.TrimSpace(out.Stdout) == "" {
		t.Fatal("no pid printed")
	}
	pid := d.sessionPIDs(ctx)["s1"]
	ks := d.kernelStart(ctx)
	if ks.Mode != "fork" || len(ks.Templates) != 1 {
		t.Fatalf("kernel_start = %+v, want mode fork with one template", ks)
	}
	tp := ks.Templates[0]
	if tp.State != "ready" || tp.PID <= 0 || tp.Starts < 1 || tp.LiveKernels < 1 || tp.PSSBytes <= 0 {
		t.Errorf("template = %+v", tp)
	}
	if got := ppid(pid); got != tp.PID {
		t.Errorf("kernel %d has parent %d, want the template %d", pid, got, tp.PID)
	}

	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d.wait(30 * time.Second)
	// Gone, not even zombies: the template reaps the kernel before it
	// exits, and init reaps the template.
	deadline := time.Now().Add(10 * time.Second)
	for exists(pid) || exists(tp.PID) {
		if time.Now().After(deadline) {
			t.Fatalf("10s after aiod was killed: kernel %d alive %v, template %d alive %v",
				pid, kerneltest.Alive(pid), tp.PID, kerneltest.Alive(tp.PID))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestForkIsChargedToItsKernel: what fork() copies at once for a kernel
// (its template's hot pages) is charged to the kernel's own memory group,
// where its memory limit counts it, and not to the template: the template
// forks in that group and goes back to aiod's right after. While it is
// there the OOM killer must pick a kernel of the group, never the template
// (it would take every forked kernel with it): the kernel's OOM score is
// 1000.
func TestForkIsChargedToItsKernel(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--code-backend", "kernel", "--kernel-prewarm", "0", "--runtime-memory-limit", "1g")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The pins come once the template's probe has run: no event reaches a
	// client, so ask discovery until they are there.
	var tp struct{ pid, hot int }
	for deadline := time.Now().Add(3 * time.Minute); tp.hot == 0; time.Sleep(50 * time.Millisecond) {
		if ks := d.kernelStart(ctx); len(ks.Templates) == 1 && ks.Templates[0].State == "ready" {
			if e := ks.Templates[0].HotError; e != "" {
				t.Fatalf("the template has no hot pages: %s", e)
			}
			tp.pid, tp.hot = ks.Templates[0].PID, ks.Templates[0].HotPages
		}
		if time.Now().After(deadline) {
			t.Fatalf("no hot pages 3 minutes after start; log:\n%s", d.stderr)
		}
	}
	if out := d.execute(ctx, "charged", "print('ok')", 60); out.Stdout != "ok\n" {
		t.Fatalf("stdout %q", out.Stdout)
	}
	var env envelope[struct {
		Source      string `json:"source"`
		PID         int    `json:"pid"`
		MemoryBytes int64  `json:"memory_bytes"`
	}]
	d.do(ctx, http.MethodGet, "/v2/code/sessions/charged/stats", nil, &env)
	st := env.Data
	if st.Source != "cgroup" || st.PID <= 0 {
		t.Fatalf("stats = %+v, want the kernel's cgroup", st)
	}
	if hot := int64(tp.hot) * 4096; st.MemoryBytes < hot {
		t.Errorf("the kernel's group holds %d bytes, fewer than the %d bytes of hot pages its fork copied", st.MemoryBytes, hot)
	}
	memcg := func(pid int) string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "memory" {
				return f[2]
			}
		}
		return ""
	}
	if got, want := memcg(tp.pid), memcg(d.cmd.Process.Pid); got != want || got == "" {
		t.Errorf("template in memory group %q after the fork, want aiod's %q", got, want)
	}
	score := func(pid int) string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
		return strings.TrimSpace(string(b))
	}
	if got := score(st.PID); got != "1000" {
		t.Errorf("kernel's OOM score %q, want 1000", got)
	}
}

// TestSpawnModeStillWorks runs a session with --kernel-start spawn: no
// template, and the kernel is the daemon's own child.
func TestSpawnModeStillWorks(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--code-backend", "kernel", "--kernel-start", "spawn")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out := d.execute(ctx, "s1", "print(1)", 60); out.Stdout != "1\n" {
		t.Fatalf("stdout %q", out.Stdout)
	}
	ks := d.kernelStart(ctx)
	if ks.Mode != "spawn" || len(ks.Templates) != 0 {
		t.Errorf("kernel_start = %+v", ks)
	}
	if got := ppid(d.sessionPIDs(ctx)["s1"]); got != d.cmd.Process.Pid {
		t.Errorf("spawned kernel's parent %d, want aiod %d", got, d.cmd.Process.Pid)
	}
}

// TestBadKernelStartFails checks the daemon refuses an unknown mode, naming
// the flag and the value.
func TestBadKernelStartFails(t *testing.T) {
	t.Parallel()
	_, err := parseOptions([]string{"--kernel-start", "clone"}, fakeLookup(nil), io.Discard)
	if err == nil || err.Error() != `--kernel-start "clone": want fork or spawn` {
		t.Errorf("err = %v", err)
	}
	_, err = parseOptions(nil, fakeLookup(map[string]string{"AIO_KERNEL_TRANSPORT": "udp"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), `"udp": want auto, ipc or tcp`) {
		t.Errorf("err = %v", err)
	}
}

// TestRuntimesDieWithAiod kills aiod with SIGKILL while a Python REPL, a
// Node.js REPL and a bash session each spin in user code: none of them may
// outlive it (an orphaned Node.js REPL spun at 43 % of a CPU for half an
// hour before they had a parent-death signal, since a REPL only notices its
// closed command pipe between two commands).
func TestRuntimesDieWithAiod(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--code-backend", "native")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Each prints a line, then spins: the line's output event says it spins.
	spin := map[string]string{
		"python":     "print('spinning', flush=True)\nwhile True: pass",
		"javascript": "console.log('spinning'); while (true) {}",
		"bash":       "echo spinning; while :; do :; done",
	}
	pids := map[string]int{}
	for lang := range spin {
		if a := d.post(ctx, "/v2/code/execute", map[string]any{"language": lang, "code": "1", "session_id": lang}); a.err != nil || a.status != http.StatusOK {
			t.Fatalf("%s: %v %s", lang, a.err, a.raw)
		}
	}
	for sid, pid := range d.sessionPIDs(ctx) {
		pids[sid] = pid
	}
	if len(pids) != len(spin) {
		t.Fatalf("runtime pids %v, want one per language", pids)
	}
	spinning := make(chan string, len(spin))
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // on a failure below, the calls end with ctx
	for lang, code := range spin {
		wg.Add(1)
		go func() { // streams until aiod dies
			defer wg.Done()
			b, _ := json.Marshal(map[string]any{"language": lang, "code": code, "session_id": lang, "timeout": 300})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v2/code/execute", bytes.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/x-ndjson")
			resp, err := d.client.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for told := false; sc.Scan(); {
				if !told && strings.Contains(sc.Text(), `"type":"output"`) {
					spinning <- lang
					told = true
				}
			}
		}()
	}
	for range spin {
		select {
		case <-spinning:
		case <-ctx.Done():
			t.Fatal("not every runtime began its loop")
		}
	}
	// Held by their pidfds, taken while aiod is their parent.
	held := map[string]*kerneltest.Held{}
	for lang, pid := range pids {
		held[lang] = kerneltest.Hold(pid)
		defer held[lang].Release()
	}
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d.wait(30 * time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for lang, h := range held {
		if !h.Ends(deadline) {
			t.Errorf("%s's runtime (pid %d) outlived aiod by 30 s: %s", lang, h.PID, kerneltest.Describe(h.PID))
			continue
		}
		// Ended; init reaps it when it gets to it, so the daemon's stop
		// need not look for it.
		d.mu.Lock()
		delete(d.pids, h.PID)
		d.mu.Unlock()
	}
}
