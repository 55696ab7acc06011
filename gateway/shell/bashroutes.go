package shell

import (
	"context"
	"sort"
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

// Bash command statuses (CommandStatus).
const (
	bRunning = "running"
	bDone    = "completed"
	bTimeout = "timed_out"
	bKilled  = "killed"
)

func bashStatus(c *command) string {
	switch {
	case !c.finished():
		return bRunning
	case c.timedOut():
		return bTimeout
	case c.wasKilled():
		return bKilled
	}
	return bDone
}

type bashExecResult struct {
	SessionID    string  `json:"session_id"`
	CommandID    string  `json:"command_id"`
	Command      string  `json:"command"`
	Status       string  `json:"status"`
	Stdout       *string `json:"stdout"`
	Stderr       *string `json:"stderr"`
	ExitCode     *int    `json:"exit_code"`
	Offset       int     `json:"offset"`
	StderrOffset int     `json:"stderr_offset"`
}

type bashCommandInfo struct {
	CommandID string `json:"command_id"`
	Command   string `json:"command"`
	Status    string `json:"status"`
	ExitCode  *int   `json:"exit_code"`
}

type bashOutputResult struct {
	SessionID    string           `json:"session_id"`
	Stdout       string           `json:"stdout"`
	Stderr       string           `json:"stderr"`
	Offset       int              `json:"offset"`
	StderrOffset int              `json:"stderr_offset"`
	Command      *bashCommandInfo `json:"command"`
}

type bashSessionInfo struct {
	SessionID      string    `json:"session_id"`
	Status         string    `json:"status"`
	WorkingDir     string    `json:"working_dir"`
	CreatedAt      time.Time `json:"created_at"`
	LastUsedAt     time.Time `json:"last_used_at"`
	CurrentCommand *string   `json:"current_command"`
	CommandCount   int       `json:"command_count"`
}

func (ss *session) bashInfo() bashSessionInfo {
	run := ss.running()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	in := bashSessionInfo{SessionID: ss.id, Status: "ready", WorkingDir: ss.dir, CreatedAt: ss.created.UTC(),
		LastUsedAt: ss.lastUsed.UTC(), CommandCount: ss.count}
	if ss.closed {
		in.Status = "closed"
	}
	if run != nil {
		in.CurrentCommand = &run.text
	}
	return in
}

// POST /v1/bash/exec
func (s *Surface) bashExec(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	id, fe := sessionIDField(f, "session_id")
	command := f.Str("command", true)
	async := f.Bool("async_mode", false)
	maxOut, hasMaxOut := f.Int("max_output_length")
	if fe == nil {
		fe = f.Err()
	}
	var env []string
	if fe == nil {
		env, fe = call.ParseEnv(f, "env")
	}
	var wait, hard time.Duration
	var hasWait, hasHard bool
	if fe == nil {
		wait, hasWait, fe = seconds(f, "timeout", s.core.Cfg.MaxTimeout)
	}
	if fe == nil {
		hard, hasHard, fe = seconds(f, "hard_timeout", s.core.Cfg.MaxTimeout)
	}
	if fe == nil && hasMaxOut && maxOut < 0 {
		fe = bodyErr("max_output_length", "greater_than_equal", "must be 0 (no truncation) or more")
	}
	var dir string
	if fe == nil {
		dir, fe = s.dirField(ctx, f, "exec_dir", true)
	}
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	if !hasMaxOut {
		maxOut = defaultBashMaxOut
	}
	if id == "" {
		id = jupyter.NewID()
	}
	tenant := call.Tenant(ctx)
	ss, created := s.open(tenant, kindBash, id, s.core.Workspace())
	ss.mu.Lock()
	if dir != "" {
		ss.dir = dir // exec_dir becomes the session's default
	}
	dir, snap := ss.dir, ss.snapshot
	ss.mu.Unlock()
	timeout := s.core.Cfg.MaxTimeout
	if hasHard {
		timeout = hard
	}
	c := s.startBash(ctx, ss, command, dir, snap, env, timeout)
	if c == nil {
		if created {
			s.forget(ss)
		}
		return
	}
	if !async {
		if !hasWait {
			wait = s.core.Cfg.MaxTimeout
		}
		t := time.NewTimer(wait)
		select {
		case <-c.done:
		case <-t.C:
		}
		t.Stop()
	}
	api.OK(ctx, c.execResult(ss.id, int(maxOut), !async))
}

// startBash runs command in a bash of its own (the registry session
// "pipe.<session>.<command>", closed when it ends), in dir, with the
// session's snapshot sourced and env exported first. On failure it has
// answered.
func (s *Surface) startBash(ctx *fasthttp.RequestCtx, ss *session, command, dir, snap string, env []string, timeout time.Duration) *command {
	// A subshell: exit ends the command, not its bash.
	var code strings.Builder
	code.WriteString("(\n")
	if snap != "" {
		code.WriteString(". " + backend.ShellQuote(snap) + "\n")
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		code.WriteString("export " + k + "=" + backend.ShellQuote(v) + "\n")
	}
	code.WriteString(command)
	code.WriteString("\n)")
	cid := jupyter.NewID()
	c := newCommand(cid, command, "pipe."+cid, ss.tenant)
	after := func() {
		cctx, cancel := context.WithTimeout(s.core.Ctx(), 10*time.Second)
		defer cancel()
		s.core.Reg.DeleteOne(cctx, ss.tenant, "bash", c.regID)
	}
	if e := s.run(ctx, c, code.String(), dir, timeout, nil, after); e != nil {
		e.Write(ctx)
		return nil
	}
	ss.add(c)
	return c
}

// execResult renders c; trunc cuts each stream to maxOut characters
// (head and tail kept) when maxOut > 0.
func (c *command) execResult(sid string, maxOut int, trunc bool) bashExecResult {
	out, off := c.read(execution.Stdout, 0)
	errs, eoff := c.read(execution.Stderr, 0)
	if trunc && maxOut > 0 {
		out, _ = truncateMiddle(out, maxOut)
		errs, _ = truncateMiddle(errs, maxOut)
	}
	if n := c.note(); n != "" {
		errs += n
	}
	r := bashExecResult{SessionID: sid, CommandID: c.id, Command: c.text, Status: bashStatus(c),
		ExitCode: c.exitCode(), Offset: off, StderrOffset: eoff}
	if out != "" {
		r.Stdout = &out
	}
	if errs != "" {
		r.Stderr = &errs
	}
	return r
}

func (s *Surface) bashSession(ctx *fasthttp.RequestCtx, f *api.Fields) (*session, bool) {
	return s.sessionOf(ctx, f, "session_id", kindBash)
}

// commandOf is the command named by the optional command_id, else the
// session's current or last one; on failure it has answered.
func commandOf(ctx *fasthttp.RequestCtx, f *api.Fields, ss *session) (*command, bool) {
	cid := f.OptStr("command_id")
	if err := f.Err(); err != nil {
		api.InvalidV1(ctx, err)
		return nil, false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if cid != nil && *cid != "" {
		c := ss.byID[*cid]
		if c == nil {
			api.Fail(ctx, fasthttp.StatusNotFound, "no command "+quote(*cid)+" in bash session "+quote(ss.id)+" (a session remembers its last "+strconv.Itoa(maxCommands)+")")
			return nil, false
		}
		return c, true
	}
	return ss.cur, true
}

// POST /v1/bash/output
func (s *Surface) bashOutput(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	off, _ := f.Int("offset")
	eoff, _ := f.Int("stderr_offset")
	wait := f.Bool("wait", false)
	if err := f.Err(); err != nil {
		api.InvalidV1(ctx, err)
		return
	}
	if off < 0 || eoff < 0 {
		name := "offset"
		if off >= 0 {
			name = "stderr_offset"
		}
		api.InvalidV1(ctx, bodyErr(name, "greater_than_equal", "must be 0 or more"))
		return
	}
	waitFor, hasWaitFor, fe := seconds(f, "wait_timeout", s.core.Cfg.MaxTimeout)
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	if !hasWaitFor {
		waitFor = defaultWaitTimeout
	}
	ss, ok := s.bashSession(ctx, f)
	if !ok {
		return
	}
	c, ok := commandOf(ctx, f, ss)
	if !ok {
		return
	}
	res := bashOutputResult{SessionID: ss.id, Offset: int(off), StderrOffset: int(eoff)}
	if c == nil {
		api.OK(ctx, res)
		return
	}
	if wait {
		deadline := time.NewTimer(waitFor)
		defer deadline.Stop()
	loop:
		for {
			ch := c.waitChange()
			fresh := c.streamEnd(execution.Stdout) > int(off) || c.streamEnd(execution.Stderr) > int(eoff)
			if fresh || c.finished() {
				break
			}
			select {
			case <-ch:
			case <-c.done:
			case <-deadline.C:
				break loop
			}
		}
	}
	res.Stdout, res.Offset = c.read(execution.Stdout, int(off))
	res.Stderr, res.StderrOffset = c.read(execution.Stderr, int(eoff))
	res.Command = &bashCommandInfo{CommandID: c.id, Command: c.text, Status: bashStatus(c), ExitCode: c.exitCode()}
	api.OK(ctx, res)
}

// POST /v1/bash/write
func (s *Surface) bashWrite(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	input := f.Str("input", true)
	if err := f.Err(); err != nil {
		api.InvalidV1(ctx, err)
		return
	}
	ss, ok := s.bashSession(ctx, f)
	if !ok {
		return
	}
	c, ok := commandOf(ctx, f, ss)
	if !ok {
		return
	}
	if c == nil || c.finished() {
		api.Fail(ctx, fasthttp.StatusConflict, "no command is running in bash session "+quote(ss.id)+": start one with /v1/bash/exec")
		return
	}
	if err := s.writeInput(c, input); err != nil {
		writeFailed(ctx, err)
		return
	}
	okMsg(ctx, "wrote "+strconv.Itoa(len(input))+" bytes", nil)
}

var signals = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "SIGINT": syscall.SIGINT, "SIGHUP": syscall.SIGHUP,
	"SIGQUIT": syscall.SIGQUIT, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
}

// POST /v1/bash/kill
func (s *Surface) bashKill(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	name := "SIGTERM"
	if p := f.OptStr("signal"); p != nil && *p != "" {
		name = strings.ToUpper(*p)
		if !strings.HasPrefix(name, "SIG") {
			name = "SIG" + name
		}
	}
	if err := f.Err(); err != nil {
		api.InvalidV1(ctx, err)
		return
	}
	sig, known := signals[name]
	if !known {
		api.InvalidV1(ctx, bodyErr("signal", "literal_error", "unknown signal "+quote(name)+": use SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2"))
		return
	}
	ss, ok := s.bashSession(ctx, f)
	if !ok {
		return
	}
	c := ss.running()
	if c == nil {
		okMsg(ctx, "no command is running", nil)
		return
	}
	s.stop(c, sig)
	if !c.finished() {
		// The command's own bash goes with it.
		cctx, cancel := context.WithTimeout(s.core.Ctx(), 10*time.Second)
		s.core.Reg.DeleteOne(cctx, ss.tenant, "bash", c.regID)
		cancel()
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
		}
	}
	okMsg(ctx, "sent "+name+" to command "+quote(c.id)+": "+bashStatus(c), map[string]any{"command_id": c.id, "status": bashStatus(c), "exit_code": c.exitCode()})
}

// GET /v1/bash/sessions
func (s *Surface) bashList(ctx *fasthttp.RequestCtx) {
	all := s.list(call.Tenant(ctx), kindBash)
	sort.Slice(all, func(i, j int) bool { return all[i].created.Before(all[j].created) })
	out := make([]bashSessionInfo, 0, len(all))
	for _, ss := range all {
		out = append(out, ss.bashInfo())
	}
	api.OK(ctx, out)
}

// POST /v1/bash/sessions/create
func (s *Surface) bashCreate(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	id, fe := sessionIDField(f, "session_id")
	var dir string
	if fe == nil {
		dir, fe = s.dirField(ctx, f, "exec_dir", true)
	}
	var snap string
	if fe == nil {
		if p := f.OptStr("snapshot_path"); p != nil && *p != "" {
			snap = *p
			if view, err := s.core.ViewOf(ctx); err != nil {
				fe = bodyErr("snapshot_path", "value_error", "cannot check "+quote(snap)+": "+err.Error())
			} else if st, err := view.Stat(snap); err != nil || st.IsDir() || !strings.HasPrefix(snap, "/") {
				fe = bodyErr("snapshot_path", "value_error", quote(snap)+" is not an absolute path to a file")
			}
		}
		if fe == nil {
			fe = f.Err()
		}
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
	ss, created := s.open(call.Tenant(ctx), kindBash, id, dir)
	if !created {
		api.Fail(ctx, fasthttp.StatusConflict, "bash session "+quote(id)+" exists")
		return
	}
	ss.mu.Lock()
	ss.snapshot = snap
	ss.mu.Unlock()
	api.OK(ctx, ss.bashInfo())
}

// POST /v1/bash/sessions/{session_id}/close
func (s *Surface) bashClose(ctx *fasthttp.RequestCtx) {
	id, fe := api.PathParam(ctx, "session_id")
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	ss := s.lookup(call.Tenant(ctx), kindBash, id)
	if ss == nil {
		notFound(ctx, "bash", id)
		return
	}
	s.forget(ss)
	if c := ss.running(); c != nil {
		c.mu.Lock()
		c.killed = true
		c.mu.Unlock()
		cctx, cancel := context.WithTimeout(s.core.Ctx(), 10*time.Second)
		s.core.Reg.DeleteOne(cctx, ss.tenant, "bash", c.regID)
		cancel()
	}
	okMsg(ctx, "bash session "+quote(id)+" closed", nil)
}
