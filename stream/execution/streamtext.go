package execution

import (
	"bytes"
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/goccy/go-json"
)

// streamChunk is how much unescaped text unescapeChunks hands on at a time.
const streamChunk = 64 << 10

var errBadJSON = errors.New("malformed stream content")

// streamSpans finds the decoded name and the raw (still escaped) bytes of
// the text string, in whichever order the keys come.
func streamSpans(raw []byte) (name string, text []byte, err error) {
	p := &scanner{b: raw}
	if !p.consume('{') {
		return "", nil, errBadJSON
	}
	if p.consume('}') {
		return "", nil, nil
	}
	for {
		ks, ke, ok := p.str()
		if !ok || !p.consume(':') {
			return "", nil, errBadJSON
		}
		key := string(raw[ks:ke])
		p.ws()
		vs := p.i
		switch {
		case key == "text" && p.peek() == '"':
			s, e, ok := p.str()
			if !ok {
				return "", nil, errBadJSON
			}
			text = raw[s:e]
		case key == "name" && p.peek() == '"':
			if _, _, ok := p.str(); !ok {
				return "", nil, errBadJSON
			}
			if err := json.Unmarshal(raw[vs:p.i], &name); err != nil {
				return "", nil, errBadJSON
			}
		default:
			if !p.skipValue() {
				return "", nil, errBadJSON
			}
		}
		if p.consume(',') {
			continue
		}
		if p.consume('}') {
			return name, text, nil
		}
		return "", nil, errBadJSON
	}
}

// scanner walks JSON bytes just enough to find member spans.
type scanner struct {
	b []byte
	i int
}

func (p *scanner) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *scanner) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *scanner) consume(c byte) bool {
	p.ws()
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

// str moves past a string and returns the span of its contents.
func (p *scanner) str() (start, end int, ok bool) {
	if !p.consume('"') {
		return 0, 0, false
	}
	start = p.i
	for {
		// The next quote ends the string unless an odd run of backslashes
		// escapes it. IndexByte is vectorised where IndexAny of two bytes
		// is not: a 1 MB stream message took a quarter of aiod's CPU here.
		j := bytes.IndexByte(p.b[p.i:], '"')
		if j < 0 {
			return 0, 0, false
		}
		q := p.i + j
		k := q
		for k > start && p.b[k-1] == '\\' {
			k--
		}
		p.i = q + 1
		if (q-k)%2 == 0 {
			return start, q, true
		}
	}
}

// skipValue moves past one value of any type.
func (p *scanner) skipValue() bool {
	p.ws()
	depth := 0
	for p.i < len(p.b) {
		switch c := p.b[p.i]; c {
		case '"':
			if _, _, ok := p.str(); !ok {
				return false
			}
			if depth == 0 {
				return true
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return true // end of the enclosing object: a literal ended
			}
			depth--
			if depth == 0 {
				p.i++
				return true
			}
		case ',':
			if depth == 0 {
				return true
			}
		}
		p.i++
	}
	return depth == 0
}

// unescapeChunks decodes the contents of a JSON string and emits the text
// in chunks that each end on a rune boundary. A chunk is only valid during
// the call to emit.
func unescapeChunks(s []byte, emit func([]byte)) error {
	buf := make([]byte, 0, min(len(s), streamChunk)+8)
	flush := func(force bool) {
		if len(buf) == 0 {
			return
		}
		cut := len(buf)
		if !force {
			for cut > 0 && len(buf)-cut < utf8.UTFMax && !utf8.RuneStart(buf[cut-1]) {
				cut--
			}
			if cut > 0 {
				cut-- // cut before the last rune start, which may be incomplete
			}
			if cut == 0 {
				cut = len(buf)
			}
		}
		emit(buf[:cut])
		buf = append(buf[:0], buf[cut:]...)
	}
	for len(s) > 0 {
		j := bytes.IndexByte(s, '\\')
		if j < 0 {
			j = len(s)
		}
		for j > 0 { // copy the plain run in pieces
			n := min(j, streamChunk-len(buf)+1)
			if n <= 0 {
				flush(false)
				continue
			}
			buf = append(buf, s[:n]...)
			s, j = s[n:], j-n
			if len(buf) >= streamChunk {
				flush(false)
			}
		}
		if len(s) == 0 {
			break
		}
		r, n, err := unescape(s)
		if err != nil {
			return err
		}
		buf = utf8.AppendRune(buf, r)
		s = s[n:]
		if len(buf) >= streamChunk {
			flush(false)
		}
	}
	flush(true)
	return nil
}

// unescape decodes one escape at the start of s (which begins with '\').
func unescape(s []byte) (rune, int, error) {
	if len(s) < 2 {
		return 0, 0, errBadJSON
	}
	switch s[1] {
	case '"', '\\', '/':
		return rune(s[1]), 2, nil
	case 'n':
		return '\n', 2, nil
	case 't':
		return '\t', 2, nil
	case 'r':
		return '\r', 2, nil
	case 'b':
		return '\b', 2, nil
	case 'f':
		return '\f', 2, nil
	case 'u':
		r, ok := hex4(s[2:])
		if !ok {
			return 0, 0, errBadJSON
		}
		if utf16.IsSurrogate(r) {
			if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
				if r2, ok := hex4(s[8:]); ok {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						return d, 12, nil
					}
				}
			}
			return utf8.RuneError, 6, nil
		}
		return r, 6, nil
	}
	return 0, 0, errBadJSON
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(v), err == nil
}
