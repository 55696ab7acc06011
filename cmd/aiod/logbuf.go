package main

import (
	"io"
	"sync"
	"time"
)

// lineBuffer gathers the access log's lines and writes them to w in one
// write at most every flushAfter, instead of one write per request: at
// hundreds of requests a second a write per line is a measurable part of
// aiod's CPU per call. A line waits at most flushAfter; past maxBuffered
// bytes the writer writes at once (the caller waits for it, so a slow
// stderr slows requests instead of growing the buffer). Close writes what
// is left. Every Write is one whole line (slog writes a record at once), so
// lines of the buffered and the direct loggers interleave whole.
type lineBuffer struct {
	w          io.Writer
	flushAfter time.Duration

	mu     sync.Mutex
	buf    []byte
	timer  *time.Timer // armed while buf holds lines; nil before the first
	closed bool
}

const (
	lineFlushAfter = 100 * time.Millisecond
	maxBuffered    = 64 << 10
)

func newLineBuffer(w io.Writer, flushAfter time.Duration) *lineBuffer {
	return &lineBuffer{w: w, flushAfter: flushAfter}
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.w.Write(p)
	}
	wasEmpty := len(b.buf) == 0
	b.buf = append(b.buf, p...)
	if len(b.buf) >= maxBuffered {
		return len(p), b.flushLocked()
	}
	if wasEmpty {
		if b.timer == nil {
			b.timer = time.AfterFunc(b.flushAfter, b.flush)
		} else {
			b.timer.Reset(b.flushAfter)
		}
	}
	return len(p), nil
}

func (b *lineBuffer) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.flushLocked() // a log that cannot be written has nowhere to say so
}

func (b *lineBuffer) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.w.Write(b.buf)
	if cap(b.buf) > maxBuffered { // after a burst, do not keep its peak
		b.buf = nil
	} else {
		b.buf = b.buf[:0]
	}
	return err
}

// Close writes what is buffered; later writes go straight to w.
func (b *lineBuffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
	}
	return b.flushLocked()
}
