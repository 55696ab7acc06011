package fsplane

import (
	"bufio"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/aiod/aiod/gateway/api"
)

// maxRead bounds every read that lands in memory (read, replace, search,
// the editor): a file above it is refused with io_error naming the limit.
const maxRead = 64 << 20

// readAll reads a whole file of at most limit bytes.
func readAll(fsys FS, path string, limit int64) ([]byte, error) {
	src, err := openFile(fsys, path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if src.info.Size() > limit {
		return nil, errTooLarge(limit)
	}
	b, err := io.ReadAll(io.LimitReader(src, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit { // it grew since the stat
		return nil, errTooLarge(limit)
	}
	return b, nil
}

// readLines returns lines [start, end) of a file (0-based; end < 0 means to
// the end) with their line endings, and how many lines that is. Memory is
// bounded by limit whatever the file's size: lines before start are skipped
// in chunks, never held.
func readLines(fsys FS, path string, start, end, limit int64) ([]byte, int, error) {
	src, err := openFile(fsys, path)
	if err != nil {
		return nil, 0, err
	}
	defer src.Close()
	if start == 0 && end < 0 && src.info.Size() > limit {
		return nil, 0, errTooLarge(limit)
	}
	br := bufio.NewReaderSize(src, 64<<10)
	var out []byte
	var line int64
	count, inLine := 0, false
	for end < 0 || line < end {
		chunk, err := br.ReadSlice('\n')
		if line >= start && len(chunk) > 0 {
			if int64(len(out)+len(chunk)) > limit {
				return nil, 0, errTooLarge(limit)
			}
			out = append(out, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			inLine = true
			continue
		}
		if err == nil || len(chunk) > 0 || inLine {
			if line >= start {
				count++
			}
			line++
		}
		inLine = false
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
	}
	return out, count, nil
}

// checkUTF8 returns a decode_error naming the first bad byte, or nil.
func checkUTF8(path string, b []byte) error {
	if utf8.Valid(b) {
		return nil
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return errDecode(i)
		}
		i += n
	}
	return nil
}

// writeFile writes data to path in fsys, creating missing parent folders.
// With appendMode the data goes at the end. created says the file is new.
func writeFile(fsys FS, path string, data []byte, appendMode bool) (created bool, err error) {
	exists, err := checkWritable(fsys, path)
	if err != nil {
		return false, err
	}
	created = !exists
	if err := fsys.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if appendMode {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := openWrite(fsys, path, flags)
	if err != nil {
		return false, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return false, err
	}
	return created, f.Close()
}

// decodeContent turns a request's content into bytes. encoding is utf-8
// (also the default), base64, or, when allowRaw, raw: one character per
// byte, as Latin-1. A bad value is a FieldError naming the field at fault.
func decodeContent(content, encoding string, allowRaw bool) ([]byte, *api.FieldError) {
	switch strings.ToLower(encoding) {
	case "", "utf-8", "utf8":
		return []byte(content), nil
	case "base64":
		b, err := decodeBase64(content)
		if err != nil {
			return nil, badField("content", "is not valid base64: "+err.Error())
		}
		return b, nil
	case "raw", "latin-1", "latin1":
		if allowRaw {
			return decodeLatin1(content)
		}
	}
	allowed := "'utf-8' or 'base64'"
	if allowRaw {
		allowed = "'utf-8', 'base64' or 'raw'"
	}
	return nil, &api.FieldError{In: "body", Field: "encoding", Type: "literal_error",
		Msg: "must be " + allowed + ", got " + quote(encoding)}
}

// decodeBase64 accepts standard or URL alphabets, padded or not, with line
// breaks, and a data: URL prefix, as browsers and Python produce them.
func decodeBase64(s string) ([]byte, error) {
	if strings.HasPrefix(s, "data:") {
		if i := strings.Index(s, "base64,"); i >= 0 {
			s = s[i+len("base64,"):]
		}
	}
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\n' || r == '\r' || r == '\t' {
			return -1
		}
		return r
	}, s)
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		var b []byte
		if b, err = enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, err
}

func decodeLatin1(s string) ([]byte, *api.FieldError) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xFF {
			return nil, badField("content", "raw encoding holds one byte per character; "+quote(string(r))+" is above U+00FF")
		}
		out = append(out, byte(r))
	}
	return out, nil
}
