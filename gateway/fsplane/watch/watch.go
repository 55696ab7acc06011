// Package watch is the file watchers the /v1/file/watch and /v2/fs/watch
// routes (package fswatch) and the WebSocket's watch_files message
// (package live) share: a watcher follows a folder (or a file) of the
// caller's view and records create, write, remove, rename and chmod
// events, read from a cursor.
//
// A watcher scans its tree through the caller's view (the file plane's:
// under tenant isolation the tenant's file helper, as the tenant, in its
// namespaces), every debounce interval, and compares it with the last
// scan: what the caller's code can see is exactly what it watches, and
// nothing outside the view can be watched through a link. A scan reads
// each folder and stats each entry, at most MaxEntries. A rename is the
// same inode gone from one path and new at another in one scan.
package watch

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aiod/aiod/gateway/fsplane/fsview"
)

const (
	MaxWatchers       = 16    // a tenant's
	MaxEntries        = 20000 // what one scan follows
	MaxEvents         = 10000 // events a watcher keeps; older ones go (overflow)
	WatcherIdle       = 10 * time.Minute
	MinDebounceMS     = 50
	MaxDebounceMS     = 5000
	DefaultDebounceMS = 300
)

// DefaultExclude is the reference's default exclude list.
var DefaultExclude = []string{".git", "node_modules", "__pycache__", ".venv", "*.pyc", "*.pyo", ".DS_Store", "*.swp", "*.swo"}

// Event is one file event.
type Event struct {
	Seq          int64    `json:"seq"`
	Type         string   `json:"type"` // create, write, remove, rename, chmod
	Path         string   `json:"path"`
	RelativePath string   `json:"relative_path"`
	OldPath      *string  `json:"old_path"`
	IsDir        bool     `json:"is_dir"`
	Timestamp    float64  `json:"timestamp"`
	Mtime        *float64 `json:"mtime"`
	Size         *int64   `json:"size"`
	Inode        *uint64  `json:"inode"`
}

// entry is what a scan saw of one path.
type entry struct {
	isDir bool
	mode  fs.FileMode
	size  int64
	mtime time.Time
	inode uint64
}

// Spec is what a watcher follows.
type Spec struct {
	Path      string   `json:"path"`
	Recursive bool     `json:"recursive"`
	Exclude   []string `json:"exclude"`
	Include   []string `json:"include_patterns"`
	Debounce  int      `json:"debounce"`
}

// watcher is one watch of a tenant's.
type Watcher struct {
	ID      string  `json:"watcher_id"`
	Spec            // its request
	Created float64 `json:"created_at"`

	tenant string
	view   fsview.FS
	stop   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	seen     map[string]entry // guarded by mu: the last scan
	events   []Event          // guarded by mu
	seq      int64            // guarded by mu: the last event's
	dropped  int64            // guarded by mu: seq of the newest event dropped for room; 0 none
	lastUse  time.Time        // guarded by mu: the last poll, stream or create
	scanErr  string           // guarded by mu: why the last scan failed ("" none)
	changed  chan struct{}    // guarded by mu: closed (and replaced) at each new event
	attached int              // guarded by mu: streams and polls waiting now
}

// matches says whether rel (slash-separated, relative to the root) is
// excluded, and whether it is included.
func (w *Watcher) excluded(rel string) bool {
	for _, part := range strings.Split(rel, "/") {
		for _, p := range w.Exclude {
			if ok, _ := path.Match(p, part); ok || p == part {
				return true
			}
		}
	}
	return false
}

func (w *Watcher) included(rel string, isDir bool) bool {
	if len(w.Include) == 0 || isDir {
		return len(w.Include) == 0
	}
	base := path.Base(rel)
	for _, p := range w.Include {
		if ok, _ := path.Match(p, base); ok {
			return true
		}
		if ok, _ := path.Match(p, rel); ok {
			return true
		}
	}
	return false
}

// scan reads the watched tree through the view.
func (w *Watcher) scan() (map[string]entry, error) {
	out := map[string]entry{}
	root := w.Path
	fi, err := w.view.Lstat(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return out, nil // nothing there (yet): creating it is an event
		}
		return nil, err
	}
	if !fi.IsDir() {
		out[""] = entryOf(fi)
		return out, nil
	}
	var walk func(dir, rel string, depth int) error
	walk = func(dir, rel string, depth int) error {
		ents, err := w.view.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		for _, e := range ents {
			r := e.Name()
			if rel != "" {
				r = rel + "/" + e.Name()
			}
			if w.excluded(r) {
				continue
			}
			info, err := e.Info()
			if err != nil {
				continue
			}
			if len(out) >= MaxEntries {
				return fmt.Errorf("more than %d entries under %s: watch a smaller folder or exclude some", MaxEntries, w.Path)
			}
			out[r] = entryOf(info)
			if info.IsDir() && w.Recursive && depth < 64 {
				if err := walk(path.Join(dir, e.Name()), r, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(root, "", 0)
}

func entryOf(fi fs.FileInfo) entry {
	e := entry{isDir: fi.IsDir(), mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.inode = st.Ino
	}
	return e
}

// diff turns two scans into events, in path order.
func (w *Watcher) diff(old, now map[string]entry, at time.Time) []Event {
	var evs []Event
	gone := map[uint64]string{} // inode -> removed path, for renames
	var removed []string
	for rel := range old {
		if _, ok := now[rel]; !ok {
			removed = append(removed, rel)
		}
	}
	sort.Strings(removed)
	for _, rel := range removed {
		if ino := old[rel].inode; ino != 0 {
			gone[ino] = rel
		}
	}
	renamed := map[string]bool{}
	var rels []string
	for rel := range now {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	for _, rel := range rels {
		e := now[rel]
		was, existed := old[rel]
		switch {
		case !existed:
			if from, ok := gone[e.inode]; ok && e.inode != 0 && !renamed[from] {
				renamed[from] = true
				evs = append(evs, w.event("rename", rel, &from, e, at))
				continue
			}
			evs = append(evs, w.event("create", rel, nil, e, at))
		case was.isDir != e.isDir || was.inode != e.inode:
			evs = append(evs, w.event("remove", rel, nil, was, at), w.event("create", rel, nil, e, at))
		case !e.isDir && (was.size != e.size || !was.mtime.Equal(e.mtime)):
			evs = append(evs, w.event("write", rel, nil, e, at))
		case was.mode != e.mode:
			evs = append(evs, w.event("chmod", rel, nil, e, at))
		}
	}
	for _, rel := range removed {
		if !renamed[rel] {
			evs = append(evs, w.event("remove", rel, nil, old[rel], at))
		}
	}
	out := evs[:0]
	for _, ev := range evs {
		if w.included(ev.RelativePath, ev.IsDir) {
			out = append(out, ev)
		}
	}
	return out
}

// event makes an event of rel (seq set when recorded).
func (w *Watcher) event(typ, rel string, from *string, e entry, at time.Time) Event {
	ev := Event{Type: typ, Path: w.abs(rel), RelativePath: rel, IsDir: e.isDir, Timestamp: float64(at.UnixMilli()) / 1000}
	if rel == "" {
		ev.RelativePath = path.Base(w.Path)
	}
	if from != nil {
		old := w.abs(*from)
		ev.OldPath = &old
	}
	if typ != "remove" {
		m, size, ino := float64(e.mtime.UnixMilli())/1000, e.size, e.inode
		ev.Mtime, ev.Size, ev.Inode = &m, &size, &ino
	}
	return ev
}

func (w *Watcher) abs(rel string) string {
	if rel == "" {
		return w.Path
	}
	return path.Join(w.Path, rel)
}

// record appends evs, dropping the oldest past MaxEvents, and wakes the
// waiters.
func (w *Watcher) record(evs []Event) {
	if len(evs) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range evs {
		w.seq++
		ev.Seq = w.seq
		w.events = append(w.events, ev)
	}
	if n := len(w.events) - MaxEvents; n > 0 {
		w.dropped = w.events[n-1].Seq
		w.events = append([]Event(nil), w.events[n:]...)
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// run scans every debounce until stop.
func (w *Watcher) run() {
	defer close(w.done)
	tick := time.NewTicker(time.Duration(w.Debounce) * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case now := <-tick.C:
			scan, err := w.scan()
			w.mu.Lock()
			if err != nil {
				w.scanErr = err.Error()
				w.mu.Unlock()
				continue
			}
			w.scanErr = ""
			old := w.seen
			w.seen = scan
			w.mu.Unlock()
			w.record(w.diff(old, scan, now))
		}
	}
}

// since returns up to limit events after cursor, the cursor to poll from
// next, and whether events after cursor were dropped.
func (w *Watcher) Since(cursor int64, limit int) ([]Event, int64, bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastUse = time.Now()
	overflow := cursor < w.dropped
	out := []Event{}
	next := max(cursor, w.dropped)
	for _, ev := range w.events {
		if ev.Seq > cursor && len(out) < limit {
			out = append(out, ev)
			next = ev.Seq
		}
	}
	if len(out) == 0 {
		next = max(cursor, w.dropped)
	}
	return out, next, overflow, w.changed
}

// watchers is every tenant's watchers.
type Watchers struct {
	mu     sync.Mutex
	byID   map[string]*Watcher // guarded by mu
	closed bool                // guarded by mu
}

// start makes and starts a watcher of spec for tenant in view; its first
// scan is taken now, so that only later changes are events.
func (ws *Watchers) Start(tenant string, view fsview.FS, spec Spec) (*Watcher, error) {
	ws.mu.Lock()
	n := 0
	for _, w := range ws.byID {
		if w.tenant == tenant {
			n++
		}
	}
	closed := ws.closed
	ws.mu.Unlock()
	if closed {
		return nil, errors.New("aiod is shutting down")
	}
	if n >= MaxWatchers {
		return nil, ErrTooMany
	}
	w := &Watcher{ID: newWatcherID(), Spec: spec, Created: float64(time.Now().UnixMilli()) / 1000,
		tenant: tenant, view: view, stop: make(chan struct{}), done: make(chan struct{}),
		changed: make(chan struct{}), lastUse: time.Now()}
	scan, err := w.scan()
	if err != nil {
		return nil, err
	}
	w.seen = scan
	ws.mu.Lock()
	if ws.closed {
		ws.mu.Unlock()
		return nil, errors.New("aiod is shutting down")
	}
	n = 0 // again: others may have started meanwhile
	for _, o := range ws.byID {
		if o.tenant == tenant {
			n++
		}
	}
	if n >= MaxWatchers {
		ws.mu.Unlock()
		return nil, ErrTooMany
	}
	ws.byID[w.ID] = w
	ws.mu.Unlock()
	go w.run() // stopOne stops it and waits
	return w, nil
}

// newWatcherID is "w-" and 96 random bits in hex.
func newWatcherID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "w-" + hex.EncodeToString(b)
}

var ErrTooMany = fmt.Errorf("at most %d watchers a tenant: stop one (DELETE /v1/file/watch/{watcher_id})", MaxWatchers)

// get is tenant's watcher id, or nil.
func (ws *Watchers) Get(tenant, id string) *Watcher {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w := ws.byID[id]; w != nil && w.tenant == tenant {
		return w
	}
	return nil
}

// stopOne stops w and waits for its scanner.
func (ws *Watchers) Stop(w *Watcher) {
	ws.mu.Lock()
	_, ok := ws.byID[w.ID]
	delete(ws.byID, w.ID)
	ws.mu.Unlock()
	if ok {
		close(w.stop)
		<-w.done
	}
}

// reap stops watchers nobody has polled or followed for WatcherIdle.
func (ws *Watchers) Reap(now time.Time) {
	ws.mu.Lock()
	var idle []*Watcher
	for _, w := range ws.byID {
		w.mu.Lock()
		if w.attached == 0 && now.Sub(w.lastUse) > WatcherIdle {
			idle = append(idle, w)
		}
		w.mu.Unlock()
	}
	ws.mu.Unlock()
	for _, w := range idle {
		ws.Stop(w)
	}
}

// closeAll stops every watcher; no new one starts.
func (ws *Watchers) CloseAll() {
	ws.mu.Lock()
	ws.closed = true
	all := make([]*Watcher, 0, len(ws.byID))
	for _, w := range ws.byID {
		all = append(all, w)
	}
	ws.mu.Unlock()
	for _, w := range all {
		ws.Stop(w)
	}
}

// cleanPath makes p absolute (from base) and clean.
func CleanPath(p, base string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	return filepath.Clean(p)
}

// NewWatchers makes an empty registry.
func NewWatchers() *Watchers { return &Watchers{byID: map[string]*Watcher{}} }

// Mine is tenant's watchers.
func (ws *Watchers) Mine(tenant string) []*Watcher {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var out []*Watcher
	for _, w := range ws.byID {
		if w.tenant == tenant {
			out = append(out, w)
		}
	}
	return out
}

// Last is the seq of the last event so far.
func (w *Watcher) Last() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq
}

// Stopped is closed once the watcher is stopped.
func (w *Watcher) Stopped() <-chan struct{} { return w.stop }

// Attach counts a reader waiting on the watcher (a poll, a stream), which
// keeps it from being stopped as idle; the function returned undoes it.
func (w *Watcher) Attach() (detach func()) {
	w.mu.Lock()
	w.attached++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		w.attached--
		w.lastUse = time.Now()
		w.mu.Unlock()
	}
}

// Model is the watcher as the routes answer it.
func (w *Watcher) Model() map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := map[string]any{"watcher_id": w.ID, "path": w.Path, "recursive": w.Recursive, "exclude": w.Exclude,
		"include_patterns": w.Include, "debounce": w.Debounce, "created_at": w.Created, "last_seq": w.seq}
	if w.scanErr != "" {
		v["error"] = w.scanErr
	}
	return v
}

// Seen reports what the watcher's last scan holds at rel (relative to its
// path), as a create event: a file that was there before any event.
func (w *Watcher) Seen(rel string) (Event, bool) {
	w.mu.Lock()
	e, ok := w.seen[rel]
	w.mu.Unlock()
	if !ok {
		return Event{}, false
	}
	return w.event("create", rel, nil, e, time.Now()), true
}

// Exists is a create event of path p as it is now in view, for a wait
// that asks for create of a file already there.
func Exists(view fsview.FS, dir, name string) (Event, bool) {
	fi, err := view.Lstat(dir + "/" + name)
	if err != nil {
		return Event{}, false
	}
	return (&Watcher{Spec: Spec{Path: dir}}).event("create", name, nil, entryOf(fi), time.Now()), true
}
