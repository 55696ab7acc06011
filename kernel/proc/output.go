package proc

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
)

// Output is the io.Writer given to a kernel (or template) process as
// stdout and stderr. It logs each complete line at debug level and keeps
// the last tailSize bytes for error messages. Write never blocks on
// anything but its own mutex, so the process can never wedge on a full
// pipe.
type Output struct {
	Log *slog.Logger

	mu   sync.Mutex
	tail []byte // last tailSize bytes written
	line []byte // incomplete last line, not logged yet
}

const (
	tailSize    = 4 << 10
	maxLineSize = 8 << 10
)

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tail = append(o.tail, p...)
	if over := len(o.tail) - tailSize; over > 0 {
		o.tail = append(o.tail[:0], o.tail[over:]...)
	}
	o.line = append(o.line, p...)
	for {
		i := bytes.IndexByte(o.line, '\n')
		if i < 0 {
			break
		}
		o.logLine(o.line[:i])
		o.line = o.line[i+1:]
	}
	if len(o.line) > maxLineSize {
		o.logLine(o.line)
		o.line = nil
	}
	o.line = append([]byte(nil), o.line...)
	return len(p), nil
}

func (o *Output) logLine(b []byte) {
	if o.Log.Enabled(context.Background(), slog.LevelDebug) {
		o.Log.Debug("kernel output", "line", string(bytes.TrimRight(b, "\r")))
	}
}

// String returns the kept tail of the output.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(bytes.TrimSpace(o.tail))
}
