package fsplane

import (
	"bytes"
	"errors"
	"regexp"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
)

// maxSearchMatches bounds /v1/file/search; past it truncated is true.
const maxSearchMatches = 10_000

// pathV1 picks the request's file system and resolves a v1 path in it. A
// relative, empty or out-of-root path is a FileOperationError
// (invalid_path or permission_denied) with HTTP 200, like any other
// expected failure. ok false means it has answered.
func (s *server) pathV1(ctx *fasthttp.RequestCtx, op, raw string) (FS, string, bool) {
	fsys, ok := s.viewFor(ctx)
	if !ok {
		return nil, "", false
	}
	p, ok := s.resolveV1(ctx, fsys, op, raw)
	return fsys, p, ok
}

// resolveV1 resolves a v1 path in fsys, answering a failure as pathV1
// does. ok false means it has answered.
func (s *server) resolveV1(ctx *fasthttp.RequestCtx, fsys FS, op, raw string) (string, bool) {
	p, err := s.resolve(fsys, raw)
	if err != nil {
		s.failV1(ctx, op, raw, err)
		return "", false
	}
	return p, true
}

// v1Read answers POST /v1/file/read. start_line is 0-based, end_line
// exclusive (a Python slice; negative values are refused with a 422).
// line_count, an extra field, counts the lines returned.
func (s *server) v1Read(ctx *fasthttp.RequestCtx) {
	f := decodeV1(ctx)
	if f == nil {
		return
	}
	raw := f.Str("file", true)
	start, _ := f.Int("start_line")
	end, hasEnd := f.Int("end_line")
	f.Bool("sudo", false)
	fe := f.Err()
	switch {
	case fe != nil:
	case start < 0:
		fe = badField("start_line", "must be 0 or more")
	case hasEnd && end < 0:
		fe = badField("end_line", "must be 0 or more")
	}
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	if !hasEnd {
		end = -1
	}
	fsys, p, ok := s.pathV1(ctx, "read", raw)
	if !ok {
		return
	}
	b, n, err := readLines(fsys, p, start, end, maxRead)
	if err == nil {
		err = checkUTF8(p, b)
	}
	if err != nil {
		s.failV1(ctx, "read", p, err)
		return
	}
	okV1(ctx, "File read successfully", map[string]any{"content": string(b), "file": p, "line_count": n})
}

// v1Write answers POST /v1/file/write. leading_newline and trailing_newline
// apply to text (utf-8 and raw), not to base64.
func (s *server) v1Write(ctx *fasthttp.RequestCtx) {
	f := decodeV1(ctx)
	if f == nil {
		return
	}
	raw, content, enc := f.Str("file", true), f.Str("content", true), f.Str("encoding", false)
	appendMode := f.Bool("append", false)
	leading, trailing := f.Bool("leading_newline", false), f.Bool("trailing_newline", false)
	f.Bool("sudo", false)
	if fe := f.Err(); fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	data, fe := decodeContent(content, enc, true)
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	if !strings.EqualFold(enc, "base64") {
		if leading {
			data = append([]byte{'\n'}, data...)
		}
		if trailing {
			data = append(data, '\n')
		}
	}
	fsys, p, ok := s.pathV1(ctx, "write", raw)
	if !ok {
		return
	}
	if _, err := writeFile(fsys, p, data, appendMode); err != nil {
		s.failV1(ctx, "write", p, err)
		return
	}
	okV1(ctx, "File written successfully", map[string]any{"file": p, "bytes_written": len(data)})
}

// v1Replace answers POST /v1/file/replace: every occurrence of old_str. No
// occurrence is a success with replaced_count 0.
func (s *server) v1Replace(ctx *fasthttp.RequestCtx) {
	f := decodeV1(ctx)
	if f == nil {
		return
	}
	raw, oldS, newS := f.Str("file", true), f.Str("old_str", true), f.Str("new_str", true)
	f.Bool("sudo", false)
	fe := f.Err()
	if fe == nil && oldS == "" {
		fe = badField("old_str", "must not be empty")
	}
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	fsys, p, ok := s.pathV1(ctx, "replace", raw)
	if !ok {
		return
	}
	b, err := readAll(fsys, p, maxRead)
	n := bytes.Count(b, []byte(oldS))
	if err == nil && n > 0 {
		err = writeAll(fsys, p, bytes.ReplaceAll(b, []byte(oldS), []byte(newS)))
	}
	if err != nil {
		s.failV1(ctx, "replace", p, err)
		return
	}
	msg := "Replaced " + itoa(n) + " occurrence(s)"
	okV1(ctx, msg, map[string]any{"file": p, "replaced_count": n})
}

// v1Search answers POST /v1/file/search: the lines matching regex (RE2
// syntax, searched within each line), with 1-based line_numbers like grep.
// A regex RE2 cannot compile (e.g. a look-ahead) is a 422 on "regex".
func (s *server) v1Search(ctx *fasthttp.RequestCtx) {
	f := decodeV1(ctx)
	if f == nil {
		return
	}
	raw, expr := f.Str("file", true), f.Str("regex", true)
	f.Bool("sudo", false)
	if fe := f.Err(); fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		api.InvalidV1(ctx, badField("regex", "is not a valid RE2 regular expression: "+err.Error()))
		return
	}
	fsys, p, ok := s.pathV1(ctx, "search", raw)
	if !ok {
		return
	}
	b, err := readAll(fsys, p, maxRead)
	if err != nil {
		s.failV1(ctx, "search", p, err)
		return
	}
	matches, numbers := []string{}, []int{}
	truncated := false
	for i, line := range splitLines(b) {
		if !re.Match(line) {
			continue
		}
		if len(matches) == maxSearchMatches {
			truncated = true
			break
		}
		matches = append(matches, textOf(line))
		numbers = append(numbers, i+1)
	}
	okV1(ctx, "Search completed", map[string]any{
		"file": p, "matches": matches, "line_numbers": numbers, "truncated": truncated,
	})
}

// v1Download answers GET /v1/file/download?path=&change_policy=ignore|abort
// with the raw bytes. Failures are HTTP statuses with a JSON envelope whose
// data is a FileOperationError: 404 missing, 403 denied, 400 a folder, 409
// the file changed (abort policy). A missing or relative path is a 422.
func (s *server) v1Download(ctx *fasthttp.RequestCtx) {
	q := queryFields(ctx)
	raw, policy := q.Str("path", true), q.Str("change_policy", false)
	fe := queryErr(q.Err())
	if fe == nil && policy != "" && policy != "ignore" && policy != "abort" {
		fe = &api.FieldError{In: "query", Field: "change_policy", Type: "literal_error",
			Msg: "must be 'ignore' or 'abort', got " + quote(policy)}
	}
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	fsys, ok := s.viewFor(ctx)
	if !ok {
		return
	}
	p, err := s.resolve(fsys, raw)
	if err != nil && classify(err).kind == kindInvalidPath {
		api.InvalidV1(ctx, &api.FieldError{In: "query", Field: "path", Type: "value_error", Msg: classify(err).reason})
		return
	}
	if err == nil {
		err = sendFile(ctx, fsys, p, policy == "abort")
	}
	if err != nil {
		s.downloadFailV1(ctx, raw, err)
	}
}

func (s *server) downloadFailV1(ctx *fasthttp.RequestCtx, path string, err error) {
	fe := fileError("download", path, err)
	status := v2Status(classify(err))
	if status == fasthttp.StatusUnprocessableEntity {
		status = fasthttp.StatusBadRequest // 422 is reserved for FastAPI's shape
	}
	if errors.Is(err, errChanged) {
		status, fe.Retryable = fasthttp.StatusConflict, true
	}
	s.logUnexpected("download", path, fe.ErrorType, err)
	api.WriteJSON(ctx, status, api.Envelope{Success: false, Message: fe.Message, Data: fe})
}

// v1Upload answers POST /v1/file/upload (multipart: "file", optional "path").
func (s *server) v1Upload(ctx *fasthttp.RequestCtx) {
	up, fe := s.readUpload(ctx)
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	fsys, ok := s.viewFor(ctx)
	if !ok {
		return
	}
	p, ok := s.resolveV1(ctx, fsys, "upload", s.destIn(fsys, up))
	if !ok {
		return
	}
	n, err := saveUpload(fsys, up.file, p, true) // v1 replaces, as it always did: the SDK has no overwrite flag
	if err != nil {
		s.failV1(ctx, "upload", p, err)
		return
	}
	okV1(ctx, "File uploaded successfully", map[string]any{"file_path": p, "file_size": n, "success": true})
}

// splitLines splits on "\n"; a final line without one counts, an empty
// tail after the last "\n" does not.
func splitLines(b []byte) [][]byte {
	lines := bytes.Split(b, []byte{'\n'})
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// textOf is a line as JSON-safe text: a trailing "\r" dropped, invalid
// UTF-8 replaced by U+FFFD.
func textOf(line []byte) string {
	return string(bytes.ToValidUTF8(bytes.TrimSuffix(line, []byte{'\r'}), []byte("\uFFFD")))
}
