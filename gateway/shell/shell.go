// Package shell serves the agent_sandbox SDK's shell and bash clients:
// /v1/shell/* (a persistent bash per session: cd, variables and functions
// survive; one combined output; view, wait, write, kill) and /v1/bash/*
// (a bash process per command, stdout and stderr apart, read by offset;
// the session keeps only the working folder). Both run on the call core as
// language "bash" executions, under the same admission, limits and tenant
// isolation as every runtime (docs/shell.md).
package shell

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
)

// Config is what the surface needs beyond the core.
type Config struct {
	// TerminalPath is where the page's terminal is (GET
	// /v1/shell/terminal-url answers it as a full URL).
	TerminalPath string
	MaxSessions  int // --max-sessions, as /v1/shell/sessions/stats reports it (0: no cap)
}

// Session kinds: the two route families keep their sessions apart.
const (
	kindShell = "shell"
	kindBash  = "bash"
)

const (
	maxCommands        = 10  // commands a bash session remembers (by command_id)
	defaultNoChange    = 120 // seconds: a shell session's no_change_timeout
	shellTruncate      = 30000
	defaultBashMaxOut  = 50000
	defaultWaitTimeout = 30 * time.Second
)

// Surface is the shell and bash routes.
type Surface struct {
	core *call.Core
	cfg  Config

	mu       sync.Mutex
	sessions map[key]*session
}

type key struct{ tenant, kind, id string }

// New makes the surface.
func New(core *call.Core, cfg Config) *Surface {
	return &Surface{core: core, cfg: cfg, sessions: map[key]*session{}}
}

// Register adds the routes.
func (s *Surface) Register(r *router.Router) {
	r.POST("/v1/shell/exec", s.shellExec)
	r.POST("/v1/shell/view", s.shellView)
	r.POST("/v1/shell/wait", s.shellWait)
	r.POST("/v1/shell/write", s.shellWrite)
	r.POST("/v1/shell/kill", s.shellKill)
	r.POST("/v1/shell/sessions/create", s.shellCreate)
	r.POST("/v1/shell/sessions/update", s.shellUpdate)
	r.GET("/v1/shell/sessions", s.shellList)
	r.DELETE("/v1/shell/sessions", s.shellDeleteAll)
	r.DELETE("/v1/shell/sessions/{session_id}", s.shellDelete)
	r.GET("/v1/shell/sessions/stats", s.shellStats)
	r.GET("/v1/shell/terminal-url", s.terminalURL)

	r.POST("/v1/bash/exec", s.bashExec)
	r.POST("/v1/bash/output", s.bashOutput)
	r.POST("/v1/bash/write", s.bashWrite)
	r.POST("/v1/bash/kill", s.bashKill)
	r.GET("/v1/bash/sessions", s.bashList)
	r.POST("/v1/bash/sessions/create", s.bashCreate)
	r.POST("/v1/bash/sessions/{session_id}/close", s.bashClose)
}

// session is what the surface keeps of one shell or bash session. A shell
// session is the registry's bash session of the same id; a bash session
// starts a registry session per command (its regID).
type session struct {
	kind, tenant, id string
	created          time.Time

	mu       sync.Mutex // guards the fields below
	lastUsed time.Time
	dir      string        // shell: where it started; bash: the default exec folder
	noChange time.Duration // shell: no_change_timeout
	snapshot string        // bash: a script sourced before each command
	count    int
	cur      *command // the current or last command
	byID     map[string]*command
	order    []string
	closed   bool
}

func (ss *session) touch() {
	ss.mu.Lock()
	ss.lastUsed = time.Now()
	ss.mu.Unlock()
}

// current is the command running now, or nil.
func (ss *session) running() *command {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.cur != nil && !ss.cur.finished() {
		return ss.cur
	}
	return nil
}

func (ss *session) last() *command {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.cur
}

// add makes c the session's current command.
func (ss *session) add(c *command) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.cur, ss.lastUsed = c, time.Now()
	ss.count++
	if ss.byID == nil {
		ss.byID = map[string]*command{}
	}
	for _, id := range ss.order {
		ss.byID[id].age()
	}
	ss.byID[c.id] = c
	ss.order = append(ss.order, c.id)
	if len(ss.order) > maxCommands {
		delete(ss.byID, ss.order[0])
		ss.order = ss.order[1:]
	}
}

// claim makes c the shell session's current command unless one is
// running (busy); prev is the command it replaces, for unclaim.
func (ss *session) claim(c *command) (prev, busy *command) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.cur != nil && !ss.cur.finished() {
		return nil, ss.cur
	}
	prev = ss.cur
	ss.cur, ss.lastUsed = c, time.Now()
	ss.count++
	return prev, nil
}

// unclaim puts prev back when c could not start.
func (ss *session) unclaim(c, prev *command) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.cur == c {
		ss.cur = prev
		ss.count--
	}
}

// lookup finds a session of the caller's tenant.
func (s *Surface) lookup(tenant, kind, id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[key{tenant, kind, id}]
}

// open returns the session, creating it; created says which.
func (s *Surface) open(tenant, kind, id, dir string) (*session, bool) {
	s.prune()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{tenant, kind, id}
	if ss := s.sessions[k]; ss != nil {
		return ss, false
	}
	now := time.Now()
	ss := &session{kind: kind, tenant: tenant, id: id, created: now, lastUsed: now, dir: dir,
		noChange: defaultNoChange * time.Second}
	s.sessions[k] = ss
	return ss, true
}

func (s *Surface) forget(ss *session) {
	s.mu.Lock()
	if s.sessions[key{ss.tenant, ss.kind, ss.id}] == ss {
		delete(s.sessions, key{ss.tenant, ss.kind, ss.id})
	}
	s.mu.Unlock()
	ss.mu.Lock()
	ss.closed = true
	ss.mu.Unlock()
}

// prune forgets sessions unused for longer than native sessions' idle
// limit, with no command running (a shell session's bash has been
// reclaimed by then): what they held goes with them.
func (s *Surface) prune() {
	idle := s.core.Cfg.NativeIdle
	if idle <= 0 {
		return
	}
	s.mu.Lock()
	var old []*session
	for k, ss := range s.sessions {
		ss.mu.Lock()
		stale := time.Since(ss.lastUsed) > idle && (ss.cur == nil || ss.cur.finished())
		ss.mu.Unlock()
		if stale {
			delete(s.sessions, k)
			old = append(old, ss)
		}
	}
	s.mu.Unlock()
	for _, ss := range old {
		ss.mu.Lock()
		ss.closed = true
		ss.mu.Unlock()
	}
}

// list is the tenant's sessions of kind.
func (s *Surface) list(tenant, kind string) []*session {
	s.prune()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*session
	for k, ss := range s.sessions {
		if k.tenant == tenant && k.kind == kind {
			out = append(out, ss)
		}
	}
	return out
}

// command is one command run in a session: its execution, whose record in
// the execution store holds its outputs (read by offset), followed for its
// changes, and its end.
type command struct {
	id, text string
	regID    string // the registry session it runs in
	tenant   string
	started  time.Time
	store    *execution.Store
	recID    string // its execution's id in store

	mu         sync.Mutex
	rec        *execution.Record // its execution while it runs; then nil (the store has it)
	changed    chan struct{}
	lastChange time.Time
	running    chan struct{} // closed when its runtime starts it (status busy)
	runningOne sync.Once     // closes running
	done       chan struct{}
	ended      bool // it ran to an end (its result came): exit and timeout say how
	exit       int
	timeout    bool // its hard timeout ended it
	fail       *call.Error
	killed     bool
}

// newCommand makes a command; attach gives it its execution.
func newCommand(id, text, regID, tenant string) *command {
	now := time.Now()
	return &command{id: id, text: text, regID: regID, tenant: tenant, started: now, lastChange: now,
		changed: make(chan struct{}), running: make(chan struct{}), done: make(chan struct{})}
}

// age lets go of c's execution: a later command has started in its
// session (end does too). Its outputs are then the store's to keep or
// evict, within the store's bounds (--execution-retention,
// --execution-retention-bytes), and read back from it.
func (c *command) age() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec = nil
}

// attach makes rec c's execution and follows it: its busy status starts
// c, each output it records is a change of c.
func (c *command) attach(store *execution.Store, rec *execution.Record) {
	c.mu.Lock()
	c.store, c.recID, c.rec = store, rec.ID, rec
	c.mu.Unlock()
	// A new record replays nothing; Follow ends with the result.
	_, _ = rec.Follow(0, c.follow)
}

// follow hears each entry of c's execution once the record holds it (so
// that a reader woken by it finds the text); it runs under the record's
// lock and must not block or call the record.
func (c *command) follow(e execution.Entry) {
	if e.Event.State == jupyter.StateBusy {
		c.runningOne.Do(func() { close(c.running) })
		return
	}
	if e.Event.Out == nil || e.Event.Out.Type != jupyter.MsgStream {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastChange = time.Now()
	close(c.changed)
	c.changed = make(chan struct{})
}

// read is c's output of stream name (execution.Stdout, execution.Stderr,
// or execution.AllStreams) from byte offset off, and its end offset; an
// execution the store no longer holds reads as nothing more.
func (c *command) read(name string, off int) (string, int) {
	c.mu.Lock()
	rec, store := c.rec, c.store
	c.mu.Unlock()
	if rec == nil && store != nil {
		rec, _ = store.Get(c.tenant, c.recID)
	}
	if rec == nil {
		return "", off
	}
	text, end, _ := rec.StreamFrom(name, off)
	return text, end
}

// streamEnd is the end offset of c's stream name, without its text (read
// from past every offset: nothing is copied); 0 when the store no longer
// holds it.
func (c *command) streamEnd(name string) int {
	if _, end := c.read(name, math.MaxInt); end != math.MaxInt {
		return end
	}
	return 0
}

// output is c's whole output as a shell shows it (both streams).
func (c *command) output() string {
	text, _ := c.read(execution.AllStreams, 0)
	return text
}

// end records how the command ended.
func (c *command) end(res *execution.Result, fail *call.Error) {
	c.mu.Lock()
	// Only how it ended is kept: its outputs are the execution store's,
	// and a result holds them too (up to --output-budget).
	if res != nil {
		c.ended, c.exit, c.timeout = true, res.ExitCode(), res.Status == execution.StatusTimeout
		if res.ExitStatus != nil {
			c.exit = *res.ExitStatus
		}
	}
	c.fail = fail
	c.rec = nil // finished: the store has it (in its cache, or on disk)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	close(c.done)
}

func (c *command) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// exitCode is the command's exit code once it ended (nil before).
func (c *command) exitCode() *int {
	if !c.finished() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 1
	switch {
	case c.ended:
		n = c.exit
	}
	return &n
}

// timedOut says whether the command's hard timeout ended it.
func (c *command) timedOut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.timeout
}

func (c *command) wasKilled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.killed || c.fail != nil
}

// note is why the command could not run, or "".
func (c *command) note() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return c.fail.Msg
	}
	return ""
}

// waitChange returns a channel closed at the next output or at the end.
func (c *command) waitChange() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

func (c *command) quietFor() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.lastChange)
}

// run starts code as command c in registry session c.regID (created in
// dir when new), in the background; the command ends by itself.
func (s *Surface) run(ctx *fasthttp.RequestCtx, c *command, code, dir string, timeout time.Duration, env []string, after func()) *call.Error {
	cl := call.Call{Language: "bash", Code: code, SessionID: c.regID, Timeout: timeout, Cwd: dir, Env: env,
		Owner: call.Owner(ctx), Tenant: call.Tenant(ctx)}
	rec, _, e := s.core.Claim(cl)
	if e != nil {
		return e
	}
	c.attach(s.core.Reg.Executions(), rec)
	ok := s.core.Go(func() {
		res, e := s.core.RunClaimed(s.core.Ctx(), cl, rec)
		c.end(res, e)
		if after != nil {
			after()
		}
	})
	if !ok {
		e := &call.Error{Status: fasthttp.StatusServiceUnavailable, Msg: "aiod is shutting down"}
		rec.Fail(e)
		return e
	}
	return nil
}

// jobRuntime is what a bash runtime offers beyond jupyter.Runtime.
type jobRuntime interface {
	WriteInput(ctx context.Context, text string) error
	SignalJob(sig syscall.Signal) error
}

// job is the bash runtime of registry session regID, or nil.
func (s *Surface) job(tenant, regID string) (jobRuntime, jupyter.Runtime) {
	sess := s.core.Reg.Get(tenant, "bash", regID)
	if sess == nil {
		return nil, nil
	}
	rt := sess.Runtime()
	j, _ := jupyter.Find[jobRuntime](rt)
	return j, rt
}

// stop ends c: sig to its job (SIGINT: to the shell too, which abandons
// the rest of the command line); if it still runs after a grace, SIGINT
// again (one that reaches bash while it forks is lost, as at a terminal);
// then SIGKILL to the job and SIGINT to the shell. A signal that reaches
// the shell before it has read the command is lost too, so the first one
// waits for the command's start. It waits up to stopWithin in all.
func (s *Surface) stop(c *command, sig syscall.Signal) {
	c.mu.Lock()
	c.killed = true
	c.mu.Unlock()
	j, rt := s.job(c.tenant, c.regID)
	if rt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopWithin)
	defer cancel()
	select {
	case <-c.running:
	case <-c.done:
		return
	case <-ctx.Done():
		return
	}
	if sig == syscall.SIGINT || j == nil {
		_ = rt.Interrupt(ctx)
	} else {
		_ = j.SignalJob(sig)
	}
	select {
	case <-c.done:
		return
	case <-time.After(time.Second):
	}
	if sig == syscall.SIGINT {
		_ = rt.Interrupt(ctx)
		select {
		case <-c.done:
			return
		case <-time.After(time.Second):
		}
	}
	if j != nil {
		_ = j.SignalJob(syscall.SIGKILL)
	}
	_ = rt.Interrupt(ctx)
	select {
	case <-c.done:
	case <-ctx.Done():
	}
}

// stopWithin bounds stop: on a loaded machine a shell took more than 5 s
// to read a command, be interrupted and report the end.
const stopWithin = 15 * time.Second

// writeInput writes text to c's standard input, waiting up to 10 s for
// its runtime to start it.
func (s *Surface) writeInput(c *command, text string) error {
	// An accepted command may still wait for its runtime to start, or
	// for its turn: its input is for it once the runtime runs it (its
	// busy status), not before; bash would otherwise say nothing runs.
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-c.running:
	case <-c.done:
		return errNotRunning
	case <-t.C:
		return errNotRunning
	}
	j, _ := s.job(c.tenant, c.regID)
	if j == nil {
		return errNotRunning
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return j.WriteInput(ctx, text)
}

type errString string

func (e errString) Error() string { return string(e) }

const errNotRunning = errString("no command is running in this session")

// readBody decodes a v1 body (empty or null is {}); on failure it has
// answered the 422.
func readBody(ctx *fasthttp.RequestCtx) (*api.Fields, bool) {
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return nil, false
	}
	return f, true
}

func bodyErr(field, typ, msg string) *api.FieldError {
	return &api.FieldError{In: "body", Field: field, Type: typ, Msg: msg}
}

// dirField reads an optional absolute folder; it must exist in the
// caller's view when must is true. ok false: absent (or, not must, missing).
func (s *Surface) dirField(ctx *fasthttp.RequestCtx, f *api.Fields, name string, must bool) (string, *api.FieldError) {
	p := f.OptStr(name)
	if err := f.Err(); err != nil {
		return "", err
	}
	if p == nil || *p == "" {
		return "", nil
	}
	dir := *p
	if !strings.HasPrefix(dir, "/") {
		return "", bodyErr(name, "value_error", "must be an absolute path, got "+quote(dir))
	}
	view, err := s.core.ViewOf(ctx)
	if err != nil {
		return "", bodyErr(name, "value_error", "cannot check "+quote(dir)+": "+err.Error())
	}
	st, err := view.Stat(dir)
	switch {
	case err != nil && must:
		return "", bodyErr(name, "value_error", "cannot use "+quote(dir)+" as the working directory: "+err.Error())
	case err != nil:
		return "", nil
	case !st.IsDir() && must:
		return "", bodyErr(name, "value_error", quote(dir)+" is not a directory")
	case !st.IsDir():
		return "", nil
	}
	return dir, nil
}

func quote(s string) string { return `"` + s + `"` }

// sessionIDField reads an optional session id ("" when absent).
func sessionIDField(f *api.Fields, name string) (string, *api.FieldError) {
	p := f.OptStr(name)
	if err := f.Err(); err != nil {
		return "", err
	}
	if p == nil {
		return "", nil
	}
	return *p, call.ValidSessionID(name, *p)
}

// seconds reads an optional positive number of seconds, at most max.
func seconds(f *api.Fields, name string, max time.Duration) (time.Duration, bool, *api.FieldError) {
	v, ok := f.Float(name)
	if err := f.Err(); err != nil {
		return 0, false, err
	}
	if !ok {
		return 0, false, nil
	}
	if v <= 0 || v > max.Seconds() || v != v {
		return 0, false, bodyErr(name, "less_than_equal", "must be more than 0 and at most "+trimFloat(max.Seconds())+" seconds")
	}
	return time.Duration(v * float64(time.Second)), true, nil
}

func trimFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// okMsg answers data with success true and msg.
func okMsg(ctx *fasthttp.RequestCtx, msg string, data any) {
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: msg, Data: data})
}

// notFound answers an unknown session id.
func notFound(ctx *fasthttp.RequestCtx, kind, id string) {
	api.Fail(ctx, fasthttp.StatusNotFound, "no "+kind+" session "+quote(id))
}

// truncateMiddle keeps the head and the tail of s within max characters
// (runes), without a copy of s as runes: s may be megabytes.
func truncateMiddle(s string, max int) (string, bool) {
	n := utf8.RuneCountInString(s)
	if max <= 0 || n <= max {
		return s, false
	}
	const marker = "\n... [output truncated] ...\n"
	keep := max - utf8.RuneCountInString(marker)
	if keep < 2 {
		return s[runeOffset(s, n-max):], true
	}
	head := keep / 2
	return s[:runeOffset(s, head)] + marker + s[runeOffset(s, n-(keep-head)):], true
}

// runeOffset is the byte offset of s's i-th rune.
func runeOffset(s string, i int) int {
	for off := range s {
		if i == 0 {
			return off
		}
		i--
	}
	return len(s)
}
