package replbridge

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/kernel/kerneltest"
)

const waitLimit = 60 * time.Second // generous: a shared 2-core machine

// TestMain fails the run if a test leaves a goroutine or a child process.
func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }

// stamped is a message and when the handler got it.
type stamped = kerneltest.Stamped

// recorder keeps every message a REPL delivers.
type recorder = kerneltest.Recorder

func newRecorder() *recorder { return kerneltest.NewRecorder() }

// result is one execution as a test sees it.
type result struct {
	msgs           []stamped
	stdout, stderr string
	value          string // execute_result text/plain
	hasValue       bool
	err            *errorContent
	reply          map[string]any
}

func (res *result) fold() {
	var out, errb strings.Builder
	for _, m := range res.msgs {
		switch m.Header.MsgType {
		case "stream":
			var c struct{ Name, Text string }
			json.Unmarshal(m.Content, &c)
			if c.Name == "stdout" {
				out.WriteString(c.Text)
			} else {
				errb.WriteString(c.Text)
			}
		case "execute_result":
			var c struct {
				Data map[string]string `json:"data"`
			}
			json.Unmarshal(m.Content, &c)
			res.value, res.hasValue = c.Data["text/plain"], true
		case "error":
			res.err = &errorContent{}
			json.Unmarshal(m.Content, res.err)
		case "execute_reply":
			json.Unmarshal(m.Content, &res.reply)
		}
	}
	res.stdout, res.stderr = out.String(), errb.String()
}

func finished(msgs []stamped) bool {
	idle, reply := false, false
	for _, m := range msgs {
		idle = idle || (m.Header.MsgType == "status" && strings.Contains(string(m.Content), "idle"))
		reply = reply || m.Header.MsgType == "execute_reply"
	}
	return idle && reply
}

// harness is one started REPL and its recorder.
type harness struct {
	t    testing.TB
	r    *REPL
	rec  *recorder
	lang string
	n    int
}

func start(t testing.TB, lang string) *harness {
	t.Helper()
	kerneltest.SkipShort(t, "a REPL")
	rec := newRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	r, err := Start(ctx, Options{Language: lang, Handler: rec.Handle, StartTimeout: waitLimit})
	if err != nil {
		t.Fatalf("start %s: %v", lang, err)
	}
	h := &harness{t: t, r: r, rec: rec, lang: lang}
	t.Cleanup(func() { h.close() })
	return h
}

// close closes the REPL and checks that its process group is gone.
func (h *harness) close() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.r.Close(ctx); err != nil {
		h.t.Errorf("close: %v", err)
	}
	if pids := groupMembers(h.r.Info().PID, 5*time.Second); len(pids) > 0 {
		h.t.Errorf("process group %d still has live processes %v after Close", h.r.Info().PID, pids)
	}
}

// groupMembers polls /proc until no live (non-zombie) process is in process
// group pgid or within passes, and returns those left. Killed children that
// were re-parented stay zombies until init reaps them; they do not count.
func groupMembers(pgid int, within time.Duration) []string {
	deadline := time.Now().Add(within)
	for {
		var live []string
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, p := range stats {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			s := string(b)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state ppid pgrp ...
			if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
				live = append(live, p)
			}
		}
		if len(live) == 0 || time.Now().After(deadline) {
			return live
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// send starts code and returns its msg id.
func (h *harness) send(code string) string {
	h.t.Helper()
	h.n++
	id := fmt.Sprintf("%s-req-%d", h.lang, h.n)
	if err := h.r.Execute(context.Background(), jupyter.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		h.t.Fatalf("execute %q: %v", code, err)
	}
	return id
}

// await waits for idle and execute_reply of id and folds its messages.
func (h *harness) await(id string, limit time.Duration) *result {
	h.t.Helper()
	if !h.rec.WaitUntil(limit, func() bool { return finished(h.rec.Stamped(id)) }) {
		h.t.Fatalf("execution %s: no idle and execute_reply within %s; got %s", id, limit, dump(h.rec.Stamped(id)))
	}
	res := &result{msgs: h.rec.Stamped(id)}
	res.fold()
	return res
}

func (h *harness) run(code string) *result {
	h.t.Helper()
	return h.await(h.send(code), waitLimit)
}

// ok runs code and fails the test if it raised.
func (h *harness) ok(code string) *result {
	h.t.Helper()
	res := h.run(code)
	if res.err != nil {
		h.t.Fatalf("run %q: %s: %s\n%s", code, res.err.Ename, res.err.Evalue, strings.Join(res.err.Traceback, "\n"))
	}
	return res
}

func dump(msgs []stamped) string {
	var b strings.Builder
	for _, m := range msgs {
		c := string(m.Content)
		if len(c) > 200 {
			c = c[:200] + "..."
		}
		fmt.Fprintf(&b, "\n  %s %s %s", m.Channel, m.Header.MsgType, c)
	}
	return b.String()
}
