package replbridge

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/bufconn"
	"github.com/aiod/aiod/kernel/jupyter"
)

const (
	readChunk   = 64 << 10 // one read from stdout/stderr, at most one stream message
	errTailSize = 2 << 10
)

// chunks holds the read buffers of every REPL's pipes. A reader takes one
// only once its pipe is readable and gives it back after the read, so an
// idle REPL holds none: with a buffer of its own per pipe, 100 idle native
// sessions cost aiod 19 MiB (three 64 KiB buffers each).
var chunks = bufconn.NewPool(readChunk)

// readPooled waits until the pipe behind rc is readable, reads what is
// there (up to readChunk bytes) into a buffer from chunks and passes it to
// use, which must not keep it. It returns io.EOF at the end of the pipe
// and an error once the file is closed.
func readPooled(rc syscall.RawConn, use func([]byte)) error { return chunks.Read(rc, use) }

// readStream is the one reader of the process's stdout or stderr (name). It
// turns every read into a stream message at once (live output), holding
// back only bytes that may begin the end marker or an unfinished UTF-8
// character, and finds the current execution's end marker.
func (r *REPL) readStream(f *os.File, name string) {
	defer r.readers.Done()
	var pend []byte
	rc, err := f.SyscallConn()
	for err == nil {
		err = readPooled(rc, func(b []byte) { pend = r.scan(name, append(pend, b...)) })
	}
	_, parent := r.expect(name)
	r.emitStream(name, pend, parent)
}

// scan emits what pend holds up to any end marker, records markers, and
// returns the bytes it held back.
func (r *REPL) scan(name string, pend []byte) []byte {
	for {
		marker, parent := r.expect(name)
		if i := bytes.Index(pend, marker); marker != nil && i >= 0 {
			r.emitStream(name, pend[:i], parent)
			pend = pend[i+len(marker):]
			r.markerSeen(name)
			continue
		}
		keep := holdBack(pend, marker)
		r.emitStream(name, pend[:len(pend)-keep], parent)
		return append([]byte(nil), pend[len(pend)-keep:]...)
	}
}

// expect returns the end marker this pipe still waits for (nil if none) and
// the parent for its output: the current execution, else the last one.
func (r *REPL) expect(name string) ([]byte, jupyter.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.cur
	if x == nil {
		return nil, r.last
	}
	if (name == "stdout" && x.outSeen) || (name == "stderr" && x.errSeen) {
		return nil, x.parent
	}
	return x.marker, x.parent
}

func (r *REPL) markerSeen(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if x := r.cur; x != nil {
		if name == "stdout" {
			x.outSeen = true
		} else {
			x.errSeen = true
		}
	}
	r.maybeFinishLocked()
}

func (r *REPL) emitStream(name string, b []byte, parent jupyter.Header) {
	if len(b) == 0 {
		return
	}
	if name == "stderr" {
		r.keepErrTail(b)
	}
	text := strings.ToValidUTF8(string(b), "\uFFFD")
	r.emit("iopub", "stream", parent, map[string]string{"name": name, "text": text})
}

func (r *REPL) keepErrTail(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errTail = append(r.errTail, b...)
	if n := len(r.errTail); n > errTailSize {
		r.errTail = append([]byte(nil), r.errTail[n-errTailSize:]...)
	}
}

// holdBack returns how many trailing bytes of b must wait for the next read:
// a proper prefix of marker, or the start of a UTF-8 character cut by the read.
func holdBack(b, marker []byte) int {
	k := 0
	for n := min(len(marker)-1, len(b)); n > 0; n-- {
		if bytes.HasSuffix(b, marker[:n]) {
			k = n
			break
		}
	}
	return k + cutRune(b[:len(b)-k])
}

// cutRune returns the length of an unfinished multi-byte character at the
// end of b, or 0.
func cutRune(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		c := b[i]
		switch {
		case c < 0x80:
			return 0
		case c >= 0xC0:
			need := 2
			if c >= 0xF0 {
				need = 4
			} else if c >= 0xE0 {
				need = 3
			}
			if len(b)-i < need {
				return len(b) - i
			}
			return 0
		}
	}
	return 0
}

// readControl is the one reader of the driver's control pipe (fd 4).
func (r *REPL) readControl() {
	defer r.readers.Done()
	var pend []byte // an unfinished line
	rc, err := r.ctlR.SyscallConn()
	for err == nil {
		err = readPooled(rc, func(b []byte) { pend = append(pend, b...) })
		rest := pend
		for {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			if line := rest[:i+1]; len(bytes.TrimSpace(line)) > 0 {
				r.handleControl(line)
			}
			rest = rest[i+1:]
		}
		pend = append([]byte(nil), rest...) // drop the lines handled
	}
	if len(bytes.TrimSpace(pend)) > 0 {
		r.handleControl(pend)
	}
}

func (r *REPL) handleControl(line []byte) {
	var m driverMsg
	if err := json.Unmarshal(line, &m); err != nil {
		r.log.Error("decode native REPL control line", "pid", r.pid, "err", err)
		return
	}
	switch m.Type {
	case "ready":
		select {
		case r.ready <- m.Version:
		default:
		}
	case "complete_reply", "inspect_reply":
		r.mu.Lock()
		if ch := r.asks[m.ID]; ch != nil {
			select {
			case ch <- &m:
			default:
			}
		}
		r.mu.Unlock()
	case "done":
		r.mu.Lock()
		if x := r.cur; x != nil && x.reply == nil {
			x.reply = &m
		}
		r.maybeFinishLocked()
		r.mu.Unlock()
	}
}
