package shell

import (
	"bufio"
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/execution"
)

// Shell command statuses (BashCommandStatus).
const (
	stRunning  = "running"
	stDone     = "completed"
	stNoChange = "no_change_timeout"
	stHard     = "hard_timeout"
	stKilled   = "terminated"
)

// consoleRecord is one command as a terminal shows it.
type consoleRecord struct {
	PS1     string `json:"ps1"`
	Command string `json:"command"`
	Output  string `json:"output"`
}

// shellResult is ShellCommandResult and ShellViewResult in one: view
// requires output, exec requires command.
type shellResult struct {
	SessionID string          `json:"session_id"`
	Command   string          `json:"command"`
	Status    string          `json:"status"`
	Output    string          `json:"output"`
	Console   []consoleRecord `json:"console"`
	ExitCode  *int            `json:"exit_code"`
}

func (ss *session) shellStatus(c *command) string {
	switch {
	case c == nil:
		return stDone // nothing ran yet
	case !c.finished():
		return stRunning
	case c.timedOut():
		return stHard
	case c.wasKilled():
		return stKilled
	}
	return stDone
}

// result renders c (the session's current command when nil).
func (ss *session) result(c *command, status string, truncate bool) shellResult {
	if c == nil {
		return shellResult{SessionID: ss.id, Status: stDone, Console: []consoleRecord{}}
	}
	if status == "" {
		status = ss.shellStatus(c)
	}
	out := execution.StripANSI(c.output())
	if truncate {
		out, _ = truncateMiddle(out, shellTruncate)
	}
	if n := c.note(); n != "" {
		out += n
	}
	r := shellResult{SessionID: ss.id, Command: c.text, Status: status, Output: out, ExitCode: c.exitCode(),
		Console: []consoleRecord{{PS1: ss.ps1(), Command: c.text, Output: out}}}
	if status != stDone && status != stHard && status != stKilled {
		r.ExitCode = nil
	}
	return r
}

func (ss *session) ps1() string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return "aiod:" + ss.dir + "$"
}

func (s *Surface) shellSession(ctx *fasthttp.RequestCtx, f *api.Fields) (*session, bool) {
	return s.sessionOf(ctx, f, "id", kindShell)
}

// sessionOf is the caller's session of kind (kindShell, kindBash) named by
// the request's field, touched; otherwise it answers 422 or 404 itself.
func (s *Surface) sessionOf(ctx *fasthttp.RequestCtx, f *api.Fields, field, kind string) (*session, bool) {
	id := f.Str(field, true)
	if err := f.Err(); err != nil {
		api.InvalidV1(ctx, err)
		return nil, false
	}
	ss := s.lookup(call.Tenant(ctx), kind, id)
	if ss == nil {
		notFound(ctx, kind, id)
		return nil, false
	}
	ss.touch()
	return ss, true
}

// noChangeErr refuses a no_change_timeout outside 1 s to --max-timeout.
func (s *Surface) noChangeErr() *api.FieldError {
	return bodyErr("no_change_timeout", "less_than_equal", "must be from 1 to "+trimFloat(s.core.Cfg.MaxTimeout.Seconds())+" seconds")
}

// POST /v1/shell/exec
func (s *Surface) shellExec(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	id, fe := sessionIDField(f, "id")
	command := f.Str("command", true)
	async := f.Bool("async_mode", false)
	strict := f.Bool("strict", false)
	truncate := f.Bool("truncate", true)
	_ = f.Bool("preserve_symlinks", false)
	noChangeN, hasNoChange := f.Int("no_change_timeout")
	if fe == nil {
		fe = f.Err()
	}
	var wait, hard time.Duration
	var hasWait, hasHard bool
	if fe == nil {
		wait, hasWait, fe = seconds(f, "timeout", s.core.Cfg.MaxTimeout)
	}
	if fe == nil {
		hard, hasHard, fe = seconds(f, "hard_timeout", s.core.Cfg.MaxTimeout)
	}
	if fe == nil && hasNoChange && (noChangeN < 1 || time.Duration(noChangeN)*time.Second > s.core.Cfg.MaxTimeout) {
		fe = s.noChangeErr()
	}
	var dir string
	if fe == nil {
		dir, fe = s.dirField(ctx, f, "exec_dir", strict)
	}
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	tenant := call.Tenant(ctx)
	if id == "" {
		id = jupyter.NewID()
	}
	ss, created := s.open(tenant, kindShell, id, s.core.Workspace())
	c := newCommand(jupyter.NewID(), command, id, tenant)
	prev, busy := ss.claim(c)
	if busy != nil {
		api.Fail(ctx, fasthttp.StatusConflict, "a command is running in shell session "+quote(id)+" ("+quote(busy.text)+"): wait for it, write to it or kill it first")
		return
	}
	// One combined output in the order written, as on a terminal: the
	// group runs in the shell itself, so cd and variables last.
	code := "{ " + command + "\n} 2>&1"
	if dir != "" && !created {
		code = "cd -- " + backend.ShellQuote(dir) + "\n" + code
	}
	ss.mu.Lock()
	startDir := ss.dir
	noChange := ss.noChange
	ss.mu.Unlock()
	if created && dir != "" {
		startDir = dir
		ss.mu.Lock()
		ss.dir = dir
		ss.mu.Unlock()
	}
	if hasNoChange {
		noChange = time.Duration(noChangeN) * time.Second
	}
	timeout := s.core.Cfg.MaxTimeout
	if hasHard {
		timeout = hard
	}
	if e := s.run(ctx, c, code, startDir, timeout, nil, nil); e != nil {
		ss.unclaim(c, prev)
		if created {
			s.forget(ss)
		}
		e.Write(ctx)
		return
	}
	if async {
		api.OK(ctx, ss.result(c, stRunning, truncate))
		return
	}
	if !hasWait {
		wait = s.core.Cfg.MaxTimeout
	}
	if strings.Contains(string(ctx.Request.Header.Peek("Accept")), "text/event-stream") {
		s.streamShell(ctx, ss, c, wait, noChange, truncate)
		return
	}
	api.OK(ctx, ss.result(c, awaitShell(c, wait, noChange), truncate))
}

// streamShell answers /v1/shell/exec as server-sent events: "output"
// events ({session_id, command, status: "running", output}: the text
// written since the previous event) as the command writes, ": keepalive"
// comments every 15 s, and one "result" event, the ShellCommandResult the
// JSON answer would have been, when the command ends or the wait does
// (timeout: running; no_change_timeout). A client that goes away leaves
// the command running.
func (s *Surface) streamShell(ctx *fasthttp.RequestCtx, ss *session, c *command, wait, noChange time.Duration, truncate bool) {
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	base, conn := s.core.Ctx(), ctx.Conn()
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		event := func(name string, v any) bool {
			b, _ := api.Marshal(v)
			api.Arm(conn, s.core.Cfg.StreamWrite)
			_, _ = w.WriteString("event: " + name + "\ndata: ")
			_, _ = w.Write(b)
			_, _ = w.WriteString("\n\n")
			return api.Flush(conn, w, s.core.Cfg.StreamWrite) == nil
		}
		deadline := time.Now().Add(wait)
		sent := 0
		for {
			ch := c.waitChange()
			text, end := c.read(execution.AllStreams, sent)
			if text != "" {
				sent = end
				if !event("output", map[string]string{"session_id": ss.id, "command": c.text, "status": stRunning,
					"output": execution.StripANSI(text)}) {
					return
				}
			}
			status := ""
			switch {
			case c.finished():
			case !time.Now().Before(deadline):
				status = stRunning
			case c.quietFor() >= noChange:
				status = stNoChange
			default:
				next := min(time.Until(deadline), noChange-c.quietFor(), 15*time.Second)
				t := time.NewTimer(next)
				select {
				case <-ch:
				case <-c.done:
				case <-t.C:
					if c.quietFor() < noChange && time.Now().Before(deadline) {
						_, _ = w.WriteString(": keepalive\n\n")
						if api.Flush(conn, w, s.core.Cfg.StreamWrite) != nil {
							t.Stop()
							return
						}
					}
				case <-base.Done():
					t.Stop()
					return
				}
				t.Stop()
				continue
			}
			event("result", ss.result(c, status, truncate))
			return
		}
	})
}

// awaitShell waits for c to end, for at most wait, or until its output
// has not changed for noChange; it returns the status to answer.
func awaitShell(c *command, wait, noChange time.Duration) string {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		ch := c.waitChange()
		quiet := noChange - c.quietFor()
		if quiet <= 0 {
			return stNoChange
		}
		t := time.NewTimer(quiet)
		select {
		case <-c.done:
			t.Stop()
			return ""
		case <-deadline.C:
			t.Stop()
			return stRunning
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// POST /v1/shell/view
func (s *Surface) shellView(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	ss, ok := s.shellSession(ctx, f)
	if !ok {
		return
	}
	api.OK(ctx, ss.result(ss.last(), "", true))
}

// POST /v1/shell/wait
func (s *Surface) shellWait(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	secs, hasSecs := f.Int("seconds")
	maxSecs, hasMax := f.Int("max_wait_seconds")
	if err := f.Err(); err != nil {
		api.InvalidV1(ctx, err)
		return
	}
	limit := int64(s.core.Cfg.MaxTimeout / time.Second)
	wait := int64(defaultWaitTimeout / time.Second)
	switch {
	case hasSecs:
		wait = secs
	case hasMax:
		wait = maxSecs
	}
	if hasSecs && hasMax && maxSecs < secs {
		wait = maxSecs
	}
	if wait < 0 || wait > limit {
		name := "seconds"
		if !hasSecs {
			name = "max_wait_seconds"
		}
		api.InvalidV1(ctx, bodyErr(name, "less_than_equal", "must be from 0 to "+trimFloat(float64(limit))+" seconds"))
		return
	}
	ss, ok := s.shellSession(ctx, f)
	if !ok {
		return
	}
	c := ss.last()
	if c != nil {
		t := time.NewTimer(time.Duration(wait) * time.Second)
		select {
		case <-c.done:
		case <-t.C:
		}
		t.Stop()
	}
	st := stDone
	if c != nil {
		st = ss.shellStatus(c)
	}
	api.OK(ctx, map[string]string{"status": st})
}

// POST /v1/shell/write
func (s *Surface) shellWrite(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	input := f.Str("input", true)
	enter := f.Bool("press_enter", false)
	if err := f.Err(); err != nil {
		api.InvalidV1(ctx, err)
		return
	}
	ss, ok := s.shellSession(ctx, f)
	if !ok {
		return
	}
	c := ss.running()
	if c == nil {
		api.Fail(ctx, fasthttp.StatusConflict, "no command is running in shell session "+quote(ss.id)+": run one with /v1/shell/exec")
		return
	}
	if enter {
		input += "\n"
	}
	if err := s.writeInput(c, input); err != nil {
		writeFailed(ctx, err)
		return
	}
	time.Sleep(50 * time.Millisecond) // let a prompt's answer show in the status
	api.OK(ctx, map[string]string{"status": ss.shellStatus(c)})
}

func writeFailed(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, errNotRunning) || strings.Contains(err.Error(), "no command is running") {
		api.Fail(ctx, fasthttp.StatusConflict, err.Error())
		return
	}
	api.Fail(ctx, fasthttp.StatusServiceUnavailable, "write input: "+err.Error())
}

// POST /v1/shell/kill
func (s *Surface) shellKill(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	ss, ok := s.shellSession(ctx, f)
	if !ok {
		return
	}
	c := ss.running()
	if c == nil {
		last := ss.last()
		var code *int
		if last != nil {
			code = last.exitCode()
		}
		okMsg(ctx, "no command is running", map[string]any{"status": ss.shellStatus(last), "exit_code": code, "returncode": code})
		return
	}
	s.stop(c, syscall.SIGINT)
	code := c.exitCode()
	api.OK(ctx, map[string]any{"status": ss.shellStatus(c), "exit_code": code, "returncode": code})
}

// POST /v1/shell/sessions/create
func (s *Surface) shellCreate(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	id, fe := sessionIDField(f, "id")
	noChangeN, hasNoChange := f.Int("no_change_timeout")
	_ = f.Bool("preserve_symlinks", false)
	if fe == nil {
		fe = f.Err()
	}
	if fe == nil && hasNoChange && (noChangeN < 1 || time.Duration(noChangeN)*time.Second > s.core.Cfg.MaxTimeout) {
		fe = s.noChangeErr()
	}
	var dir string
	if fe == nil {
		dir, fe = s.dirField(ctx, f, "exec_dir", true)
	}
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	if id == "" {
		id = jupyter.NewID()
	}
	if dir == "" {
		dir = s.core.Workspace()
	}
	ss, created := s.open(call.Tenant(ctx), kindShell, id, dir)
	if hasNoChange {
		ss.mu.Lock()
		ss.noChange = time.Duration(noChangeN) * time.Second
		ss.mu.Unlock()
	}
	if created {
		// Start the shell now, in its folder.
		c := newCommand(jupyter.NewID(), ":", id, ss.tenant)
		if e := s.run(ctx, c, ":", dir, s.core.Cfg.MaxTimeout, nil, nil); e != nil {
			s.forget(ss)
			e.Write(ctx)
			return
		}
		select {
		case <-c.done:
		case <-time.After(s.core.Cfg.KernelStartTimeout + 10*time.Second):
		}
		if n := c.note(); n != "" {
			s.forget(ss)
			api.Fail(ctx, fasthttp.StatusServiceUnavailable, n)
			return
		}
	}
	ss.mu.Lock()
	wd := ss.dir
	ss.mu.Unlock()
	msg := "Operation successful"
	if !created {
		msg = "session exists"
	}
	okMsg(ctx, msg, map[string]string{"session_id": id, "working_dir": wd})
}

// POST /v1/shell/sessions/update
func (s *Surface) shellUpdate(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	n, has := f.Int("no_change_timeout")
	if err := f.Err(); err != nil {
		api.InvalidV1(ctx, err)
		return
	}
	if has && (n < 1 || time.Duration(n)*time.Second > s.core.Cfg.MaxTimeout) {
		api.InvalidV1(ctx, s.noChangeErr())
		return
	}
	ss, ok := s.shellSession(ctx, f)
	if !ok {
		return
	}
	if has {
		ss.mu.Lock()
		ss.noChange = time.Duration(n) * time.Second
		ss.mu.Unlock()
	}
	api.OK(ctx, nil)
}

type shellSessionInfo struct {
	WorkingDir     string    `json:"working_dir"`
	CreatedAt      time.Time `json:"created_at"`
	LastUsedAt     time.Time `json:"last_used_at"`
	AgeSeconds     int       `json:"age_seconds"`
	Status         string    `json:"status"`
	CurrentCommand *string   `json:"current_command"`
}

// GET /v1/shell/sessions
func (s *Surface) shellList(ctx *fasthttp.RequestCtx) {
	out := map[string]shellSessionInfo{}
	for _, ss := range s.list(call.Tenant(ctx), kindShell) {
		out[ss.id] = ss.info()
	}
	api.OK(ctx, map[string]any{"sessions": out})
}

func (ss *session) info() shellSessionInfo {
	run := ss.running()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	in := shellSessionInfo{WorkingDir: ss.dir, CreatedAt: ss.created.UTC(), LastUsedAt: ss.lastUsed.UTC(),
		AgeSeconds: int(time.Since(ss.created).Seconds()), Status: "idle"}
	if run != nil {
		in.Status, in.CurrentCommand = "busy", &run.text
	}
	return in
}

// DELETE /v1/shell/sessions
func (s *Surface) shellDeleteAll(ctx *fasthttp.RequestCtx) {
	n := 0
	for _, ss := range s.list(call.Tenant(ctx), kindShell) {
		s.closeShell(ss)
		n++
	}
	okMsg(ctx, "closed "+strconv.Itoa(n)+" shell sessions", nil)
}

// DELETE /v1/shell/sessions/{session_id}
func (s *Surface) shellDelete(ctx *fasthttp.RequestCtx) {
	id, fe := api.PathParam(ctx, "session_id")
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	ss := s.lookup(call.Tenant(ctx), kindShell, id)
	if ss == nil {
		notFound(ctx, "shell", id)
		return
	}
	s.closeShell(ss)
	okMsg(ctx, "shell session "+quote(id)+" closed", nil)
}

// closeShell ends a shell session and its bash.
func (s *Surface) closeShell(ss *session) {
	s.forget(ss)
	cctx, cancel := context.WithTimeout(s.core.Ctx(), 10*time.Second)
	defer cancel()
	s.core.Reg.DeleteOne(cctx, ss.tenant, "bash", ss.id)
}

// GET /v1/shell/sessions/stats
func (s *Surface) shellStats(ctx *fasthttp.RequestCtx) {
	all := s.list(call.Tenant(ctx), kindShell)
	active := 0
	for _, ss := range all {
		ss.mu.Lock()
		if time.Since(ss.lastUsed) < 5*time.Minute {
			active++
		}
		ss.mu.Unlock()
	}
	max := s.cfg.MaxSessions
	ratio := 0.0
	if max > 0 {
		ratio = float64(len(all)) / float64(max)
	}
	api.OK(ctx, map[string]any{"total_sessions": len(all), "active_sessions": active, "idle_sessions": len(all) - active,
		"max_sessions": max, "session_timeout": int(s.core.Cfg.NativeIdle.Seconds()), "usage_ratio": ratio})
}

// GET /v1/shell/terminal-url
func (s *Surface) terminalURL(ctx *fasthttp.RequestCtx) {
	scheme := "http"
	if ctx.IsTLS() {
		scheme = "https"
	}
	api.OK(ctx, scheme+"://"+string(ctx.Host())+s.cfg.TerminalPath)
}
