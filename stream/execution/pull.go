package execution

// Pulling a record: a reader that writes to a slow client (an SSE or
// NDJSON stream) takes the entries it has not had from the record's own
// log, a bounded batch at a time, instead of a queue of its own. A stream
// then holds nothing but the batch it is writing, however slowly its
// client reads: the outputs wait in the one log every reader shares, and a
// reader that falls behind the log's start is told where it is.

// maxStatuses is how many status entries a record keeps for its readers
// (an execution sends busy and idle; interrupts and restarts a few more).
const maxStatuses = 64

// Cursor is how far a reader of a record has got: the last output seq it
// had, and the status entries it had (a count of all the record ever
// recorded; -1 before its first Pull, which then starts at the first status
// after output Seq).
type Cursor struct {
	Seq      int
	Statuses int
	pos      *readerPos // the reader's place in the record's readers (Track), or nil
}

// readerPos is the last output seq a tracked reader had.
type readerPos struct{ seq int }

// Track makes cur's reader known to r until untrack is called, and Pull
// keeps its place there. A finished record that leaves the store's memory
// (it is on disk, and the cache's bytes are full) is then read by new
// readers from the file; its log keeps only what a tracked reader may
// still pull: the outputs after the least of their places, none when each
// of them fell behind the log (their next Pull tells them so). A stream
// blocked on a client that does not read then holds its batch and the
// result, not the execution's whole log.
func (r *Record) Track(cur *Cursor) (untrack func()) {
	p := &readerPos{seq: cur.Seq}
	cur.pos = p
	r.mu.Lock()
	if r.readers == nil {
		r.readers = map[*readerPos]struct{}{}
	}
	r.readers[p] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.readers, p)
		last := len(r.readers) == 0
		r.mu.Unlock()
		if x := r.x; last && x != nil {
			x.mu.Lock()
			delete(x.out, r)
			x.mu.Unlock()
		}
	}
}

// leaveMemory drops the outputs of r's log that no tracked reader may
// still pull (Track), as r leaves the store's memory, and reports whether
// a reader still pulls it.
func (r *Record) leaveMemory() (tracked bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tracked = len(r.readers) > 0
	keepAfter := r.lastSeq
	for p := range r.readers {
		if p.seq+1 >= r.firstSeq { // not behind
			keepAfter = min(keepAfter, p.seq)
		}
	}
	i := 0
	for i < len(r.entries) && r.entries[i].Seq <= keepAfter {
		old := r.entries[i]
		r.noteDroppedLocked(old.Event.Out)
		r.logBytes -= old.Event.Size() + entryOverhead
		i++
	}
	if i == 0 {
		return tracked
	}
	r.entries = append([]Entry(nil), r.entries[i:]...) // the dropped ones' frames go
	r.firstSeq = max(r.firstSeq, keepAfter+1)
	r.logLeft = len(r.entries) == 0
	return tracked
}

// NewCursor is a cursor for a reader that had the outputs up to seq after.
func NewCursor(after int) Cursor { return Cursor{Seq: after, Statuses: -1} }

func (r *Record) noteStatusLocked(e Entry) {
	r.statuses = append(r.statuses, e)
	r.statusN++
	if len(r.statuses) > maxStatuses {
		r.statuses[0] = Entry{}
		r.statuses = r.statuses[1:]
	}
}

// Pull returns, in the order the execution sent them, the entries after
// cur: the held outputs past cur.Seq, up to about maxBytes of them (at least
// one), with the statuses between them; and, once the reader has had every
// output and status, the last entry (the result, or why it could not run)
// with final true. gone is non-nil when outputs after cur.Seq were dropped
// from the log before the reader had them (it then knows where to resume
// from). An empty answer, not final, means nothing new yet.
func (r *Record) Pull(cur Cursor, maxBytes int) (entries []Entry, next Cursor, final bool, gone *GoneError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		if next.pos != nil {
			next.pos.seq = next.Seq
		}
	}()
	if r.evicted.Load() {
		return nil, cur, false, &GoneError{ID: r.ID, At: r.ended, Why: "evicted"}
	}
	if r.loaded {
		// Read back from the store's file: no log, only the result.
		cur.Seq, cur.Statuses = r.lastSeq, r.statusN
	}
	first := r.statusN - len(r.statuses) // the number of statuses[0]
	if cur.Statuses < 0 {
		cur.Statuses = r.statusN
		for i, s := range r.statuses {
			if s.Seq >= cur.Seq {
				cur.Statuses = first + i
				break
			}
		}
	}
	if cur.Statuses < first {
		cur.Statuses = first // older ones were let go: a reader that slow lost them
	}
	if cur.Seq < r.lastSeq && cur.Seq+1 < r.firstSeq {
		return nil, cur, false, &GoneError{ID: r.ID, FirstSeq: r.firstSeq,
			Why: "the stream's reader fell behind what the execution's log holds (half of --output-budget)"}
	}
	// Statuses that came before output cur.Seq+1 go first.
	statusesUpTo := func(seq int) {
		for cur.Statuses < r.statusN {
			s := r.statuses[cur.Statuses-first]
			if s.Seq > seq {
				return
			}
			entries = append(entries, s)
			cur.Statuses++
		}
	}
	statusesUpTo(cur.Seq)
	size := 0
	for _, e := range r.entries {
		if e.Seq <= cur.Seq {
			continue
		}
		if size > 0 && size+e.Event.Size() > maxBytes {
			return entries, cur, false, nil
		}
		entries = append(entries, e)
		size += e.Event.Size()
		cur.Seq = e.Seq
		statusesUpTo(cur.Seq)
	}
	if r.state != StateDone || cur.Seq < r.lastSeq || cur.Statuses < r.statusN {
		return entries, cur, false, nil
	}
	if r.runErr != nil {
		return append(entries, Entry{Seq: r.lastSeq, Err: r.runErr}), cur, true, nil
	}
	return append(entries, Entry{Seq: r.lastSeq, Event: Event{ExecID: r.ID, ExecutionID: r.ID, Result: r.result}}), cur, true, nil
}
