package execution

import (
	"strings"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Stream text by offset: a record serves an execution's stdout and stderr
// as byte streams (the agent_sandbox SDK's shell and bash sessions read
// them so, by offset), from the one log it keeps of the execution's
// outputs rather than from a copy of their own.

// Stream names for StreamFrom.
const (
	Stdout     = "stdout"
	Stderr     = "stderr"
	AllStreams = "" // stdout and stderr together, in the order they came
)

// streamIndex is the index of a stream name in Record.dropped, or -1.
func streamIndex(name string) int {
	switch name {
	case Stdout:
		return 0
	case Stderr:
		return 1
	}
	return -1
}

// streamLen is the bytes of text o carries when it is a stream output.
func streamLen(o *Output) (index, n int) {
	if o == nil || o.Type != jupyter.MsgStream {
		return -1, 0
	}
	if i := streamIndex(o.Name); i >= 0 {
		if o.textJSON == nil {
			return i, len(o.Text)
		}
		o.streamChunks(func(p []byte) { n += len(p) })
		return i, n
	}
	return -1, 0
}

// noteDroppedLocked counts the stream text of an output leaving the log.
func (r *Record) noteDroppedLocked(o *Output) {
	if i, n := streamLen(o); i >= 0 {
		r.dropped[i] += n
	}
}

// StreamFrom reads the execution's stream text of name (Stdout, Stderr or
// AllStreams) from byte offset off: the text after it and the stream's end
// offset. Offsets count every byte the stream has sent since the
// execution began. What the record no longer holds is skipped (the text
// then starts at the oldest byte held): its log keeps the last LogBytes of
// outputs, and a finished execution read back from the store's file has
// only its result's outputs (head and tail past the output budget; its
// offsets then count what the result holds), as has one whose log was let
// go as it left the store's memory (Track). ok is false when the record
// holds no outputs any more (evicted).
func (r *Record) StreamFrom(name string, off int) (text string, end int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	want := func(o *Output) bool {
		i, _ := streamLen(o)
		return i >= 0 && (name == AllStreams || o.Name == name)
	}
	var b strings.Builder
	pos := 0
	add := func(o *Output) {
		o.streamChunks(func(p []byte) {
			if pos+len(p) > off {
				skip := max(off-pos, 0)
				b.Write(p[skip:])
			}
			pos += len(p)
		})
	}
	switch {
	case r.evicted.Load():
		return "", off, false
	case !r.loaded && !r.logLeft:
		switch i := streamIndex(name); {
		case i >= 0:
			pos = r.dropped[i]
		default:
			pos = r.dropped[0] + r.dropped[1]
		}
		for _, e := range r.entries {
			if want(e.Event.Out) {
				add(e.Event.Out)
			}
		}
	case r.result != nil:
		for _, o := range r.result.Outputs {
			if want(o) {
				add(o)
			}
		}
	}
	return b.String(), pos, true
}
