package mcp

import (
	"bytes"
	"net/http"
)

// unescapeWriter writes the SDK's JSON answers with <, > and & as they are,
// as every other answer of aiod is written (api.Marshal). The SDK encodes
// its messages without HTML escaping, but its content types marshal
// themselves with encoding/json's defaults, which write \u003c, \u003e and
// \u0026. Those three escapes are turned back into their characters;
// everything else passes as it is. In JSON a backslash only ever starts an
// escape inside a string, so a scan that copies every other escape whole
// (\\ included) cannot mistake a literal "\u003c" written as "\\u003c".
type unescapeWriter struct {
	w    http.ResponseWriter
	tail []byte // the start of an escape cut by the end of a Write
}

func (u *unescapeWriter) Header() http.Header { return u.w.Header() }

// WriteHeader drops a Content-Length the handler set: the body it counted
// may get shorter.
func (u *unescapeWriter) WriteHeader(code int) {
	u.w.Header().Del("Content-Length")
	u.w.WriteHeader(code)
}

func (u *unescapeWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(u.tail) > 0 {
		p = append(u.tail, p...)
		u.tail = nil
	}
	out, tail := unescapeHTML(p)
	if len(tail) > 0 {
		u.tail = append([]byte(nil), tail...)
	}
	if len(out) > 0 {
		if _, err := u.w.Write(out); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// Flush passes a flush on (the SDK streams events); a cut escape waits
// for the rest of it.
func (u *unescapeWriter) Flush() {
	if f, ok := u.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (u *unescapeWriter) Unwrap() http.ResponseWriter { return u.w }

// close writes what is left of a cut escape.
func (u *unescapeWriter) close() {
	if len(u.tail) > 0 {
		_, _ = u.w.Write(u.tail)
		u.tail = nil
	}
}

// unescapeHTML returns b with \u003c, \u003e and \u0026 replaced by <, >
// and &, and the start of an escape b ends in (kept for the next write).
func unescapeHTML(b []byte) (out, tail []byte) {
	i := bytes.IndexByte(b, '\\')
	if i < 0 {
		return b, nil
	}
	out = make([]byte, 0, len(b))
	for i >= 0 {
		out = append(out, b[:i]...)
		b = b[i:]
		if len(b) < 2 || (b[1] == 'u' && len(b) < 6) {
			return out, b
		}
		switch {
		case b[1] != 'u':
			out = append(out, b[:2]...)
			b = b[2:]
		case b[2] == '0' && b[3] == '0' && b[4] == '3' && (b[5] == 'c' || b[5] == 'C'):
			out, b = append(out, '<'), b[6:]
		case b[2] == '0' && b[3] == '0' && b[4] == '3' && (b[5] == 'e' || b[5] == 'E'):
			out, b = append(out, '>'), b[6:]
		case b[2] == '0' && b[3] == '0' && b[4] == '2' && b[5] == '6':
			out, b = append(out, '&'), b[6:]
		default:
			out = append(out, b[:6]...)
			b = b[6:]
		}
		i = bytes.IndexByte(b, '\\')
	}
	return append(out, b...), nil
}
