package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The file helper: a process per tenant that lives in the tenant's view
// (the same plan as its runtimes, with no network) as the tenant's uid,
// under the same filter. aiod's file plane asks it to open, list, make and
// remove; it answers with results and, for an open, the descriptor itself
// (SCM_RIGHTS), which aiod then reads or writes. So every path resolves in
// the tenant's view with the tenant's rights: a link to /etc/shadow is
// EACCES, a write through a link to / is EROFS, and nothing of another
// tenant or of aiod is there to reach.
//
// The protocol: one SOCK_SEQPACKET socket; each request and each reply is
// one JSON message; replies carry the request's id and may come in any
// order; a directory listing comes in parts (More) of at most
// filesBatch entries.

const (
	filesBatch     = 512              // directory entries per reply
	filesMsgMax    = 1 << 20          // largest message
	filesTimeout   = 60 * time.Second // bound on one operation
	filesIdleAfter = 2 * time.Minute  // an unused helper is stopped
	filesParallel  = 16               // requests one helper serves at once
)

type filesReq struct {
	ID   uint64      `json:"id"`
	Op   string      `json:"op"`
	Path string      `json:"path"`
	To   string      `json:"to,omitempty"`
	Flag int         `json:"flag,omitempty"`
	Perm fs.FileMode `json:"perm,omitempty"`
}

// FileInfo is what the helper says of a file (fs.FileInfo).
type FileInfo struct {
	N  string      `json:"name"`
	S  int64       `json:"size"`
	M  fs.FileMode `json:"mode"`
	MT int64       `json:"mtime"` // Unix nanoseconds
}

func (fi *FileInfo) Name() string       { return fi.N }
func (fi *FileInfo) Size() int64        { return fi.S }
func (fi *FileInfo) Mode() fs.FileMode  { return fi.M }
func (fi *FileInfo) ModTime() time.Time { return time.Unix(0, fi.MT) }
func (fi *FileInfo) IsDir() bool        { return fi.M.IsDir() }
func (fi *FileInfo) Sys() any           { return nil }

// dirEntry is a listed entry; its Info is the entry's own (Lstat).
type dirEntry struct{ fi *FileInfo }

func (d dirEntry) Name() string               { return d.fi.N }
func (d dirEntry) IsDir() bool                { return d.fi.IsDir() }
func (d dirEntry) Type() fs.FileMode          { return d.fi.M.Type() }
func (d dirEntry) Info() (fs.FileInfo, error) { return d.fi, nil }

type filesReply struct {
	ID      uint64      `json:"id"`
	Errno   int         `json:"errno,omitempty"` // a system error
	Err     string      `json:"err,omitempty"`   // any other failure
	Info    *FileInfo   `json:"info,omitempty"`
	Entries []*FileInfo `json:"entries,omitempty"`
	More    bool        `json:"more,omitempty"` // more entries follow
	Target  string      `json:"target,omitempty"`
	fd      int         // received descriptor, -1 none
}

func infoOf(name string, fi fs.FileInfo) *FileInfo {
	return &FileInfo{N: name, S: fi.Size(), M: fi.Mode(), MT: fi.ModTime().UnixNano()}
}

// serveFiles is the helper's loop: it answers requests on conn until aiod
// closes it.
func serveFiles(f *os.File) error {
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return err
	}
	conn := fc.(*net.UnixConn)
	var wmu sync.Mutex
	send := func(r *filesReply, fd int) {
		b, _ := json.Marshal(r)
		var oob []byte
		if fd >= 0 {
			oob = unix.UnixRights(fd)
		}
		wmu.Lock()
		_, _, err := conn.WriteMsgUnix(b, oob, nil)
		wmu.Unlock()
		if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil {
			os.Exit(0) // aiod is gone
		}
	}
	sem := make(chan struct{}, filesParallel)
	buf := make([]byte, filesMsgMax)
	for {
		n, _, _, _, err := conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return nil // aiod closed its end: done
		}
		var req filesReq
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			continue
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			serveOne(&req, send)
		}()
	}
}

func serveOne(req *filesReq, send func(*filesReply, int)) {
	r := &filesReply{ID: req.ID}
	fd := -1
	var err error
	switch req.Op {
	case "open":
		// O_NONBLOCK: opening a FIFO must not wait for its other end;
		// regular files ignore it.
		fd, err = unix.Open(req.Path, req.Flag|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, uint32(req.Perm.Perm()))
		if err != nil {
			fd = -1
		}
	case "stat", "lstat":
		var fi fs.FileInfo
		if req.Op == "stat" {
			fi, err = os.Stat(req.Path)
		} else {
			fi, err = os.Lstat(req.Path)
		}
		if err == nil {
			r.Info = infoOf(fi.Name(), fi)
		}
	case "readdir":
		serveReadDir(req, send)
		return
	case "mkdirall":
		err = os.MkdirAll(req.Path, req.Perm)
	case "mkdir":
		err = os.Mkdir(req.Path, req.Perm)
	case "remove":
		err = os.Remove(req.Path)
	case "removeall":
		err = os.RemoveAll(req.Path)
	case "rename":
		err = os.Rename(req.Path, req.To)
	case "readlink":
		r.Target, err = os.Readlink(req.Path)
	default:
		err = fmt.Errorf("unknown operation %q", req.Op)
	}
	fill(r, err)
	send(r, fd)
}

func serveReadDir(req *filesReq, send func(*filesReply, int)) {
	ents, err := os.ReadDir(req.Path)
	if err != nil {
		r := &filesReply{ID: req.ID}
		fill(r, err)
		send(r, -1)
		return
	}
	for {
		part := ents[:min(filesBatch, len(ents))]
		ents = ents[len(part):]
		r := &filesReply{ID: req.ID, More: len(ents) > 0}
		for _, e := range part {
			fi, ierr := e.Info()
			if ierr != nil {
				continue // removed since it was listed
			}
			r.Entries = append(r.Entries, infoOf(e.Name(), fi))
		}
		send(r, -1)
		if !r.More {
			return
		}
	}
}

func fill(r *filesReply, err error) {
	if err == nil {
		return
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		r.Errno = int(errno)
		return
	}
	r.Err = err.Error()
}

// Files is the client of one tenant's file helper: it starts the helper
// on first use, again after it died, and stops it after filesIdleAfter
// unused. Its methods are safe for concurrent use and follow package os:
// errors are *fs.PathError (or *os.LinkError) around a syscall.Errno.
type Files struct {
	name string // whose files, for messages
	plan *Plan  // the helper's
	dir  string // its working folder
	log  *slog.Logger

	mu     sync.Mutex
	h      *filesHelper // guarded by mu; nil while none runs
	idle   *time.Timer  // guarded by mu
	closed bool         // guarded by mu
}

// filesHelper is one running helper process and the socket to it.
type filesHelper struct {
	cmd     *exec.Cmd
	conn    *net.UnixConn
	wmu     sync.Mutex
	mu      sync.Mutex
	next    uint64
	pending map[uint64]*waiter // guarded by mu; the reader alone closes their channels
	dead    error              // guarded by mu: why the helper is gone
	done    chan struct{}      // closed when reader and waiter are over
	wg      sync.WaitGroup
}

// waiter is one request's reply channel; gone is closed when its caller
// stops waiting, so that the reader never blocks on a reply nobody takes.
type waiter struct {
	ch   chan *filesReply
	gone chan struct{}
}

// Files returns the tenant's file helper client, made on first use.
func (ts *Tenants) Files(key string) (*Files, error) {
	for {
		t, err := ts.Get(key)
		if err != nil {
			return nil, err
		}
		ts.mu.Lock()
		if t.Released() {
			// Let go between Get and here: no helper for a tenant nobody
			// holds; Get makes it anew.
			ts.mu.Unlock()
			continue
		}
		if t.files == nil {
			v := t.View()
			t.files = &Files{name: "tenant " + strconv.Quote(key), plan: v.FilesPlan(), dir: v.WorkPath, log: ts.log.With("tenant", key)}
		}
		f := t.files
		ts.mu.Unlock()
		return f, nil
	}
}

// FilesAs is a file helper on the host's own view, running as uid:gid (the
// runtime user without tenant isolation): the plane then has that user's
// rights, so a link to a file the user may not read is EACCES. Close it
// when done.
func FilesAs(uid, gid uint32, dir string, log *slog.Logger) (*Files, error) {
	seccomp, err := Filter()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Files{name: fmt.Sprintf("uid %d", uid), plan: &Plan{NetFD: -1, UID: uid, GID: gid, Seccomp: seccomp}, dir: dir, log: log}, nil
}

// helper returns the running helper, starting one when none runs.
func (f *Files) helper() (*filesHelper, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errors.New("aiod is shutting down")
	}
	if f.h != nil && f.h.alive() {
		f.touchLocked()
		return f.h, nil
	}
	if f.h != nil {
		go f.h.stop()
	}
	h, err := f.start()
	if err != nil {
		return nil, fmt.Errorf("start the file helper of %s: %w", f.name, err)
	}
	f.h = h
	f.touchLocked()
	return h, nil
}

func (f *Files) touchLocked() {
	if f.idle != nil {
		f.idle.Stop()
	}
	h := f.h
	f.idle = time.AfterFunc(filesIdleAfter, func() {
		f.mu.Lock()
		if f.h != h {
			f.mu.Unlock()
			return
		}
		f.h = nil
		f.mu.Unlock()
		h.stop()
	})
}

// PID is the running helper's process id, 0 when none runs.
func (f *Files) PID() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.h == nil || !f.h.alive() {
		return 0
	}
	return f.h.cmd.Process.Pid
}

// Close stops the helper; later calls fail.
func (f *Files) Close() {
	f.mu.Lock()
	h := f.h
	f.h, f.closed = nil, true
	if f.idle != nil {
		f.idle.Stop()
	}
	f.mu.Unlock()
	if h != nil {
		h.stop()
	}
}

func (f *Files) start() (*filesHelper, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "files"), os.NewFile(uintptr(fds[1]), "files")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/files")
	cmd.Dir = f.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	out := &tail{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pf, err := planFile(f.plan)
	if err != nil {
		fc.Close()
		return nil, err
	}
	defer pf.Close()
	wrapAs(cmd, modeFiles, f.plan, nil, pf)
	if err := cmd.Start(); err != nil {
		fc.Close()
		return nil, err
	}
	h := &filesHelper{cmd: cmd, conn: fc.(*net.UnixConn), pending: map[uint64]*waiter{}, done: make(chan struct{})}
	h.wg.Add(2)
	go h.read()
	go func() {
		defer h.wg.Done()
		err := cmd.Wait()
		if s := out.String(); s != "" {
			err = fmt.Errorf("%v: %s", err, s)
		}
		// Why it is gone, for the calls the reader ends once it sees the
		// socket close.
		h.setDead(fmt.Errorf("the file helper ended: %w", err))
		h.conn.Close()
	}()
	go func() { h.wg.Wait(); close(h.done) }()
	return h, nil
}

func (h *filesHelper) alive() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dead == nil
}

// read is the socket's only reader: it hands replies to their requests.
func (h *filesHelper) read() {
	defer h.wg.Done()
	buf := make([]byte, filesMsgMax)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := h.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			h.fail(errors.New("the file helper closed its socket"))
			return
		}
		r := &filesReply{fd: -1}
		if oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) > 0 {
				if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) > 0 {
					r.fd = fds[0]
					for _, extra := range fds[1:] {
						unix.Close(extra)
					}
				}
			}
		}
		if err := json.Unmarshal(buf[:n], r); err != nil {
			if r.fd >= 0 {
				unix.Close(r.fd)
			}
			continue
		}
		h.mu.Lock()
		w := h.pending[r.ID]
		if w != nil && !r.More {
			delete(h.pending, r.ID)
		}
		h.mu.Unlock()
		if w == nil {
			if r.fd >= 0 {
				unix.Close(r.fd) // its caller gave up
			}
			continue
		}
		select {
		case w.ch <- r:
		case <-w.gone:
			if r.fd >= 0 {
				unix.Close(r.fd)
			}
		}
	}
}

func (h *filesHelper) setDead(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dead == nil {
		h.dead = err
	}
}

// fail ends every request waiting; only the reader calls it, as it ends,
// so that no reply is sent on a channel closed under it.
func (h *filesHelper) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dead == nil {
		h.dead = err
	}
	for id, w := range h.pending {
		close(w.ch)
		delete(h.pending, id)
	}
}

func (h *filesHelper) stop() {
	h.conn.Close()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-h.done:
	case <-t.C:
		_ = h.cmd.Process.Kill()
		<-h.done
	}
}

// do sends req and collects its replies (several for a listing). A
// request that only reads is sent once more, to a new helper, when the
// helper died before it answered (the tenant's code can kill it, and a
// call may meet one dying).
func (f *Files) do(req filesReq) ([]*filesReply, error) {
	rs, err, died := f.ask(req)
	if died && readOnly(req) {
		rs, err, _ = f.ask(req)
	}
	return rs, err
}

func readOnly(req filesReq) bool {
	switch req.Op {
	case "stat", "lstat", "readdir", "readlink":
		return true
	case "open":
		return req.Flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) == 0
	}
	return false
}

// ask is one try of do; died says the helper ended before it answered.
func (f *Files) ask(req filesReq) (_ []*filesReply, _ error, died bool) {
	h, err := f.helper()
	if err != nil {
		return nil, err, false
	}
	w := &waiter{ch: make(chan *filesReply, 4), gone: make(chan struct{})}
	ch := w.ch
	h.mu.Lock()
	if h.dead != nil {
		err := h.dead
		h.mu.Unlock()
		return nil, err, true
	}
	h.next++
	req.ID = h.next
	h.pending[req.ID] = w
	h.mu.Unlock()
	forget := func() {
		close(w.gone)
		h.mu.Lock()
		if h.pending[req.ID] == w {
			delete(h.pending, req.ID)
		}
		h.mu.Unlock()
	}
	b, _ := json.Marshal(req)
	h.wmu.Lock()
	h.conn.SetWriteDeadline(time.Now().Add(filesTimeout)) //nolint:errcheck // a closed conn fails the write
	_, _, err = h.conn.WriteMsgUnix(b, nil, nil)
	h.wmu.Unlock()
	if err != nil {
		// The helper's end is gone (it was killed, it exited): this one
		// is done with, and the next call starts another.
		forget()
		err = fmt.Errorf("ask the file helper: %w", err)
		h.setDead(err)
		h.conn.Close()
		return nil, err, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), filesTimeout)
	defer cancel()
	var out []*filesReply
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				return nil, f.deadErr(h), true
			}
			out = append(out, r)
			if !r.More {
				return out, nil, false
			}
		case <-ctx.Done():
			forget()
			drain(ch)
			return nil, fmt.Errorf("the file helper did not answer %s %s within %s", req.Op, req.Path, filesTimeout), false
		}
	}
}

func drain(ch chan *filesReply) {
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				return
			}
			if r.fd >= 0 {
				unix.Close(r.fd)
			}
		default:
			return
		}
	}
}

func (f *Files) deadErr(h *filesHelper) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dead
}

// one sends req and returns its single reply, or the failure as os does.
func (f *Files) one(req filesReq) (*filesReply, error) {
	rs, err := f.do(req)
	if err != nil {
		return nil, &fs.PathError{Op: req.Op, Path: req.Path, Err: err}
	}
	r := rs[0]
	switch {
	case r.Errno != 0:
		if r.fd >= 0 {
			unix.Close(r.fd)
		}
		if req.Op == "rename" {
			return nil, &os.LinkError{Op: "rename", Old: req.Path, New: req.To, Err: syscall.Errno(r.Errno)}
		}
		return nil, &fs.PathError{Op: req.Op, Path: req.Path, Err: syscall.Errno(r.Errno)}
	case r.Err != "":
		return nil, &fs.PathError{Op: req.Op, Path: req.Path, Err: errors.New(r.Err)}
	}
	return r, nil
}

// OpenFile opens name in the tenant's view with the tenant's rights, as
// os.OpenFile does; the file is aiod's to read and write.
func (f *Files) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	r, err := f.one(filesReq{Op: "open", Path: name, Flag: flag, Perm: perm})
	if err != nil {
		return nil, err
	}
	if r.fd < 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("the file helper sent no descriptor")}
	}
	// Back to blocking unless asked: the helper opened it O_NONBLOCK (see
	// serveOne).
	if flag&unix.O_NONBLOCK == 0 {
		if fl, err := unix.FcntlInt(uintptr(r.fd), unix.F_GETFL, 0); err == nil {
			_, _ = unix.FcntlInt(uintptr(r.fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
	}
	return os.NewFile(uintptr(r.fd), name), nil
}

// Open opens name for reading.
func (f *Files) Open(name string) (*os.File, error) { return f.OpenFile(name, os.O_RDONLY, 0) }

// Stat is os.Stat in the tenant's view.
func (f *Files) Stat(name string) (fs.FileInfo, error) {
	r, err := f.one(filesReq{Op: "stat", Path: name})
	if err != nil {
		return nil, err
	}
	return r.Info, nil
}

// Lstat is os.Lstat in the tenant's view.
func (f *Files) Lstat(name string) (fs.FileInfo, error) {
	r, err := f.one(filesReq{Op: "lstat", Path: name})
	if err != nil {
		return nil, err
	}
	return r.Info, nil
}

// ReadDir is os.ReadDir in the tenant's view: sorted by name, each
// entry's Info its Lstat.
func (f *Files) ReadDir(name string) ([]fs.DirEntry, error) {
	rs, err := f.do(filesReq{Op: "readdir", Path: name})
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	var out []fs.DirEntry
	for _, r := range rs {
		if r.Errno != 0 {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: syscall.Errno(r.Errno)}
		}
		if r.Err != "" {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New(r.Err)}
		}
		for _, e := range r.Entries {
			out = append(out, dirEntry{e})
		}
	}
	return out, nil
}

// MkdirAll is os.MkdirAll in the tenant's view.
func (f *Files) MkdirAll(name string, perm fs.FileMode) error {
	_, err := f.one(filesReq{Op: "mkdirall", Path: name, Perm: perm})
	return err
}

// Mkdir is os.Mkdir in the tenant's view.
func (f *Files) Mkdir(name string, perm fs.FileMode) error {
	_, err := f.one(filesReq{Op: "mkdir", Path: name, Perm: perm})
	return err
}

// Remove is os.Remove in the tenant's view.
func (f *Files) Remove(name string) error {
	_, err := f.one(filesReq{Op: "remove", Path: name})
	return err
}

// RemoveAll is os.RemoveAll in the tenant's view.
func (f *Files) RemoveAll(name string) error {
	_, err := f.one(filesReq{Op: "removeall", Path: name})
	return err
}

// Rename is os.Rename in the tenant's view.
func (f *Files) Rename(oldname, newname string) error {
	_, err := f.one(filesReq{Op: "rename", Path: oldname, To: newname})
	return err
}

// Readlink is os.Readlink in the tenant's view.
func (f *Files) Readlink(name string) (string, error) {
	r, err := f.one(filesReq{Op: "readlink", Path: name})
	if err != nil {
		return "", err
	}
	return r.Target, nil
}

// ReadFile reads a whole file of the tenant's view.
func (f *Files) ReadFile(name string) ([]byte, error) {
	fl, err := f.Open(path.Clean(name))
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	return io.ReadAll(fl)
}

// tail keeps the last 2 KiB written to it (a helper's error output).
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// running says whether the helper process runs (it stops after idling).
func (f *Files) running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h != nil
}
