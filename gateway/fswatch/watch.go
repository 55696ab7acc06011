// Package fswatch serves file watches, the agent_sandbox reference's
// /v1/file/watch routes: a watcher follows a folder (or a file) of the
// caller's view and records create, write, remove, rename and chmod
// events, which a client polls from a cursor (long-polling), follows as
// Server-Sent Events, or waits for one of (wait).
//
// A watcher scans its tree through the caller's view (the file plane's:
// under tenant isolation the tenant's file helper, as the tenant, in its
// namespaces), every debounce interval, and compares it with the last
// scan: what the caller's code can see is exactly what it watches, and
// nothing outside the view can be watched through a link. A scan reads
// each folder and stats each entry; it is bounded (maxEntries), so a
// watcher costs the tenant's helper about one readdir per folder per
// interval. Events carry seq, type, path, relative_path, old_path (a
// rename: the same inode gone from one path and new at another in one
// scan), is_dir, timestamp, mtime, size and inode.
package fswatch

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
	maxWatchers    = 16    // a tenant's
	maxEntries     = 20000 // what one scan follows
	maxEvents      = 10000 // events a watcher keeps; older ones go (overflow)
	watcherIdle    = 10 * time.Minute
	minDebounceMS  = 50
	maxDebounceMS  = 5000
	defaultDebounc = 300
)

// defaultExclude is the reference's default exclude list.
var defaultExclude = []string{".git", "node_modules", "__pycache__", ".venv", "*.pyc", "*.pyo", ".DS_Store", "*.swp", "*.swo"}

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
type watcher struct {
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
func (w *watcher) excluded(rel string) bool {
	for _, part := range strings.Split(rel, "/") {
		for _, p := range w.Exclude {
			if ok, _ := path.Match(p, part); ok || p == part {
				return true
			}
		}
	}
	return false
}

func (w *watcher) included(rel string, isDir bool) bool {
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
func (w *watcher) scan() (map[string]entry, error) {
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
			if len(out) >= maxEntries {
				return fmt.Errorf("more than %d entries under %s: watch a smaller folder or exclude some", maxEntries, w.Path)
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
func (w *watcher) diff(old, now map[string]entry, at time.Time) []Event {
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
func (w *watcher) event(typ, rel string, from *string, e entry, at time.Time) Event {
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

func (w *watcher) abs(rel string) string {
	if rel == "" {
		return w.Path
	}
	return path.Join(w.Path, rel)
}

// record appends evs, dropping the oldest past maxEvents, and wakes the
// waiters.
func (w *watcher) record(evs []Event) {
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
	if n := len(w.events) - maxEvents; n > 0 {
		w.dropped = w.events[n-1].Seq
		w.events = append([]Event(nil), w.events[n:]...)
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// run scans every debounce until stop.
func (w *watcher) run() {
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
func (w *watcher) since(cursor int64, limit int) ([]Event, int64, bool, <-chan struct{}) {
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
type watchers struct {
	mu     sync.Mutex
	byID   map[string]*watcher // guarded by mu
	closed bool                // guarded by mu
}

// start makes and starts a watcher of spec for tenant in view; its first
// scan is taken now, so that only later changes are events.
func (ws *watchers) start(tenant string, view fsview.FS, spec Spec) (*watcher, error) {
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
	if n >= maxWatchers {
		return nil, errTooMany
	}
	w := &watcher{ID: newWatcherID(), Spec: spec, Created: float64(time.Now().UnixMilli()) / 1000,
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
	if n >= maxWatchers {
		ws.mu.Unlock()
		return nil, errTooMany
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

var errTooMany = fmt.Errorf("at most %d watchers a tenant: stop one (DELETE /v1/file/watch/{watcher_id})", maxWatchers)

// get is tenant's watcher id, or nil.
func (ws *watchers) get(tenant, id string) *watcher {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w := ws.byID[id]; w != nil && w.tenant == tenant {
		return w
	}
	return nil
}

// stopOne stops w and waits for its scanner.
func (ws *watchers) stopOne(w *watcher) {
	ws.mu.Lock()
	_, ok := ws.byID[w.ID]
	delete(ws.byID, w.ID)
	ws.mu.Unlock()
	if ok {
		close(w.stop)
		<-w.done
	}
}

// reap stops watchers nobody has polled or followed for watcherIdle.
func (ws *watchers) reap(now time.Time) {
	ws.mu.Lock()
	var idle []*watcher
	for _, w := range ws.byID {
		w.mu.Lock()
		if w.attached == 0 && now.Sub(w.lastUse) > watcherIdle {
			idle = append(idle, w)
		}
		w.mu.Unlock()
	}
	ws.mu.Unlock()
	for _, w := range idle {
		ws.stopOne(w)
	}
}

// closeAll stops every watcher; no new one starts.
func (ws *watchers) closeAll() {
	ws.mu.Lock()
	ws.closed = true
	all := make([]*watcher, 0, len(ws.byID))
	for _, w := range ws.byID {
		all = append(all, w)
	}
	ws.mu.Unlock()
	for _, w := range all {
		ws.stopOne(w)
	}
}

// cleanPath makes p absolute (from base) and clean.
func cleanPath(p, base string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	return filepath.Clean(p)
}
