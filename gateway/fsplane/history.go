package fsplane

import "sync"

// Bounds of the editor's undo history: the last historyPerPath edits of each
// file, and at most historyBytes of saved content in all; past the byte
// budget the oldest snapshots, whatever their file, are forgotten first.
const (
	historyPerPath = 10
	historyBytes   = 64 << 20
)

// snapshot is a file's state before one edit.
type snapshot struct {
	content []byte
	existed bool // false: the edit created the file; undo removes it
	seq     uint64
}

// history is the str_replace_editor's undo stack per file. A file's key
// is comparable: the editor uses histKey, the file system and the path,
// since one path names different files in different callers' views. It
// lives in memory only: a restart forgets it, and edits made through other
// routes are not recorded. Safe for concurrent use.
type history struct {
	perPath int
	budget  int64

	mu   sync.Mutex // guards the fields below
	used int64
	seq  uint64
	m    map[any][]snapshot
}

func newHistory(perPath int, budget int64) *history {
	return &history{perPath: perPath, budget: budget, m: map[any][]snapshot{}}
}

// push records the state of the file key names before an edit. Content
// larger than the whole budget is not recorded (that edit cannot be
// undone).
func (h *history) push(key any, content []byte, existed bool) {
	if int64(len(content)) > h.budget {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	st := append(h.m[key], snapshot{content: content, existed: existed, seq: h.seq})
	h.used += int64(len(content))
	if len(st) > h.perPath {
		h.used -= int64(len(st[0].content))
		st = st[1:]
	}
	h.m[key] = st
	for h.used > h.budget {
		h.evictOldestLocked()
	}
}

// pop takes the most recent snapshot of the file key names.
func (h *history) pop(key any) (snapshot, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.m[key]
	if len(st) == 0 {
		return snapshot{}, false
	}
	s := st[len(st)-1]
	h.used -= int64(len(s.content))
	if len(st) == 1 {
		delete(h.m, key)
	} else {
		h.m[key] = st[:len(st)-1]
	}
	return s, true
}

// evictOldestLocked drops the oldest snapshot of all. h.mu must be held.
func (h *history) evictOldestLocked() {
	var oldest any
	var seq uint64
	for k, st := range h.m {
		if oldest == nil || st[0].seq < seq {
			oldest, seq = k, st[0].seq
		}
	}
	if oldest == nil {
		h.used = 0
		return
	}
	st := h.m[oldest]
	h.used -= int64(len(st[0].content))
	if len(st) == 1 {
		delete(h.m, oldest)
	} else {
		h.m[oldest] = st[1:]
	}
}
