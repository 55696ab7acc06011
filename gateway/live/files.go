package live

import (
	"errors"
	"fmt"
	"sync"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/fsplane/watch"
	"github.com/aiod/aiod/gateway/wsock"
)

// File watches on the socket, the watchers of /v1/file/watch (package
// fsplane/watch: the same per-tenant cap, the caller's view):
//
//	client {"type":"watch_files","id":REF,"path":…,"recursive":…,"exclude":[…],"include_patterns":[…],"debounce":MS}
//	server {"type":"watch_started","id":REF,"watcher_id":…,"path":…}
//	       {"type":"file_change","id":REF,"watcher_id":…,"event":{seq,type,path,relative_path,…}}
//	       {"type":"overflow","id":REF,"watcher_id":…,"cursor":N}   events were dropped before the socket sent them
//	client {"type":"unwatch_files","id":REF}   REF is the watch_files' id
//	server {"type":"ok","id":REF,"request":"unwatch_files"}
//
// A socket's watchers stop when it closes.

// fileWatch is one watch_files of the socket.
type fileWatch struct {
	w    *watch.Watcher
	done chan struct{} // closed when its pump is over
}

// fileWatches are the socket's watches, by the client's id.
type fileWatches struct {
	mu sync.Mutex
	by map[string]*fileWatch
}

type watchFilesMsg struct {
	Path      *string  `json:"path"`
	Recursive *bool    `json:"recursive"`
	Exclude   []string `json:"exclude"`
	Include   []string `json:"include_patterns"`
	Debounce  *int     `json:"debounce"`
}

// watchFiles starts a watcher for the socket's tenant and pumps its events
// to the socket under ref.
func (cs *codeSocket) watchFiles(ref json.RawMessage, b []byte) {
	if ref == nil {
		cs.fail(nil, fasthttp.StatusUnprocessableEntity, "field 'id': is required, so that events and unwatch_files can name the watch")
		return
	}
	var m watchFilesMsg
	if err := json.Unmarshal(b, &m); err != nil {
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, "watch_files: "+err.Error())
		return
	}
	spec := watch.Spec{Recursive: true, Exclude: watch.DefaultExclude, Include: []string{}, Debounce: watch.DefaultDebounceMS}
	switch {
	case m.Path == nil || *m.Path == "":
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, "field 'path': is required")
		return
	case m.Debounce != nil && (*m.Debounce < watch.MinDebounceMS || *m.Debounce > watch.MaxDebounceMS):
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, fmt.Sprintf("field 'debounce': must be %d to %d milliseconds", watch.MinDebounceMS, watch.MaxDebounceMS))
		return
	}
	if m.Recursive != nil {
		spec.Recursive = *m.Recursive
	}
	if m.Exclude != nil {
		spec.Exclude = m.Exclude
	}
	if m.Include != nil {
		spec.Include = m.Include
	}
	if m.Debounce != nil {
		spec.Debounce = *m.Debounce
	}
	key := string(ref)
	cs.files.mu.Lock()
	_, dup := cs.files.by[key]
	cs.files.mu.Unlock()
	if dup {
		cs.fail(ref, fasthttp.StatusConflict, "this socket already watches files under that id")
		return
	}
	spec.Path = watch.CleanPath(*m.Path, cs.core.Workspace())
	view, err := cs.core.View(cs.tenant)
	if err != nil {
		cs.fail(ref, fasthttp.StatusServiceUnavailable, "the caller's files: "+err.Error())
		return
	}
	if _, err := view.Stat(spec.Path); err != nil {
		cs.fail(ref, fasthttp.StatusNotFound, fmt.Sprintf("cannot watch %s: %v", spec.Path, err))
		return
	}
	w, err := cs.watches.Start(cs.tenant, view, spec)
	switch {
	case errors.Is(err, watch.ErrTooMany):
		cs.fail(ref, fasthttp.StatusConflict, err.Error())
		return
	case err != nil:
		cs.fail(ref, fasthttp.StatusServiceUnavailable, "watch "+spec.Path+": "+err.Error())
		return
	}
	fw := &fileWatch{w: w, done: make(chan struct{})}
	cs.files.mu.Lock()
	cs.files.by[key] = fw
	cs.files.mu.Unlock()
	b, _ = api.Marshal(map[string]any{"type": "watch_started", "id": ref, "watcher_id": w.ID, "path": w.Path})
	cs.wc.Push(wsock.Item{Raw: b})
	go cs.pumpFiles(ref, fw) // ended by the watcher's stop (unwatch_files, the socket's end)
}

// pumpFiles pushes fw's events to the socket until the watcher stops.
func (cs *codeSocket) pumpFiles(ref json.RawMessage, fw *fileWatch) {
	defer close(fw.done)
	defer fw.w.Attach()()
	cursor := fw.w.Last()
	for {
		evs, next, overflow, changed := fw.w.Since(cursor, 1000)
		if overflow {
			b, _ := api.Marshal(map[string]any{"type": "overflow", "id": ref, "watcher_id": fw.w.ID, "cursor": next})
			cs.wc.Push(wsock.Item{Raw: b})
		}
		for _, ev := range evs {
			b, _ := api.Marshal(map[string]any{"type": "file_change", "id": ref, "watcher_id": fw.w.ID, "event": ev})
			cs.wc.Push(wsock.Item{Raw: b})
		}
		cursor = next
		select {
		case <-changed:
		case <-fw.w.Stopped():
			return
		}
	}
}

// unwatchFiles stops the watch the client named ref.
func (cs *codeSocket) unwatchFiles(ref json.RawMessage) {
	cs.files.mu.Lock()
	fw := cs.files.by[string(ref)]
	delete(cs.files.by, string(ref))
	cs.files.mu.Unlock()
	if fw == nil {
		cs.fail(ref, fasthttp.StatusNotFound, "no watch_files under that id on this socket")
		return
	}
	cs.watches.Stop(fw.w)
	<-fw.done
	cs.ok(ref, "unwatch_files")
}

// stopFileWatches stops every watch of the socket, when it closes.
func (cs *codeSocket) stopFileWatches() {
	cs.files.mu.Lock()
	all := cs.files.by
	cs.files.by = map[string]*fileWatch{}
	cs.files.mu.Unlock()
	for _, fw := range all {
		cs.watches.Stop(fw.w)
		<-fw.done
	}
}
