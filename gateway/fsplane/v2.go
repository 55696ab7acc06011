package fsplane

import (
	"encoding/base64"
	"errors"
	"syscall"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
)

// pathV2 picks the request's file system and resolves a v2 path field in
// it. ok false means it has answered.
func (s *server) pathV2(ctx *fasthttp.RequestCtx, field, raw string) (FS, string, bool) {
	fsys, ok := s.viewFor(ctx)
	if !ok {
		return nil, "", false
	}
	p, ok := s.resolveV2(ctx, fsys, field, raw)
	return fsys, p, ok
}

// resolveV2 resolves a v2 path field in fsys. A malformed path is a 422
// naming the field; a path outside Root is a 403. ok false means it has
// answered.
func (s *server) resolveV2(ctx *fasthttp.RequestCtx, fsys FS, field, raw string) (string, bool) {
	p, err := s.resolve(fsys, raw)
	if err == nil {
		return p, true
	}
	c := classify(err)
	if c.kind == kindInvalidPath {
		api.Invalid(ctx, &api.FieldError{In: "body", Field: field, Msg: c.reason, Type: "value_error"})
		return "", false
	}
	s.failV2(ctx, "resolve", raw, err)
	return "", false
}

// v2Write answers POST /v2/fs/write {path, content, encoding, append}.
func (s *server) v2Write(ctx *fasthttp.RequestCtx) {
	f := decodeV2(ctx)
	if f == nil {
		return
	}
	raw, content := f.Str("path", true), f.Str("content", true)
	enc, appendMode := f.Str("encoding", false), f.Bool("append", false)
	if fe := f.Err(); fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	data, fe := decodeContent(content, enc, false)
	if fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	fsys, p, ok := s.pathV2(ctx, "path", raw)
	if !ok {
		return
	}
	created, err := writeFile(fsys, p, data, appendMode)
	if err != nil {
		s.failV2(ctx, "write", p, err)
		return
	}
	api.OK(ctx, map[string]any{"path": p, "size": len(data), "created": created, "append": appendMode})
}

// v2List answers GET /v2/fs/list?path=DIR. A file given as DIR is a 422
// (invalid target), the same status a directory gets on download.
func (s *server) v2List(ctx *fasthttp.RequestCtx) {
	fsys, p, ok := s.queryPathV2(ctx)
	if !ok {
		return
	}
	entries, err := readDirEntries(fsys, p)
	if err != nil {
		s.failV2(ctx, "list", p, err)
		return
	}
	files := make([]map[string]any, 0, len(entries))
	for _, e := range entries {
		files = append(files, map[string]any{
			"name": e.name, "path": e.path, "size": e.info.Size(),
			"is_dir": e.isDir, "modified": rfc3339(e.info.ModTime()),
		})
	}
	api.OK(ctx, map[string]any{"path": p, "files": files})
}

// queryPathV2 reads the required ?path= of a v2 GET or DELETE.
func (s *server) queryPathV2(ctx *fasthttp.RequestCtx) (FS, string, bool) {
	q := queryFields(ctx)
	raw := q.Str("path", true)
	if fe := q.Err(); fe != nil {
		api.Invalid(ctx, fe)
		return nil, "", false
	}
	return s.pathV2(ctx, "path", raw)
}

// v2Download answers GET /v2/fs/download?path=FILE with the raw bytes.
func (s *server) v2Download(ctx *fasthttp.RequestCtx) {
	fsys, p, ok := s.queryPathV2(ctx)
	if !ok {
		return
	}
	if err := sendFile(ctx, fsys, p, false); err != nil {
		s.failV2(ctx, "download", p, err)
	}
}

// v2Read answers GET /v2/fs/read?path=[&start_line=&end_line=] and POST
// /v2/fs/read {path, start_line?, end_line?}: the content as UTF-8 text, or
// base64 when the bytes are not valid UTF-8. Lines count as an editor
// counts them: from 1, end_line included (v1's read is 0-based and
// end-exclusive, as the SDK's). A range reads only what it needs, so a file
// past the read limit can still be read in parts.
func (s *server) v2Read(ctx *fasthttp.RequestCtx) {
	var f *api.Fields
	if ctx.IsGet() {
		f = queryFields(ctx)
	} else if f = decodeV2(ctx); f == nil {
		return
	}
	raw := f.Str("path", true)
	start, hasStart := f.Int("start_line")
	end, hasEnd := f.Int("end_line")
	fe := f.Err()
	switch {
	case fe != nil:
	case hasStart && start < 1:
		fe = badField("start_line", "must be 1 or more (the first line is 1)")
	case hasEnd && end < 1:
		fe = badField("end_line", "must be 1 or more (the first line is 1)")
	case hasStart && hasEnd && end < start:
		fe = badField("end_line", "must not be before start_line")
	}
	if fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	fsys, p, ok := s.pathV2(ctx, "path", raw)
	if !ok {
		return
	}
	var b []byte
	var err error
	out := map[string]any{"path": p}
	if hasStart || hasEnd {
		if !hasStart {
			start = 1
		}
		last := int64(-1)
		if hasEnd {
			last = end
		}
		var n int
		b, n, err = readLines(fsys, p, start-1, last, maxRead)
		out["start_line"], out["line_count"] = start, n
	} else {
		b, err = readAll(fsys, p, maxRead)
	}
	if err != nil {
		s.failV2(ctx, "read", p, err)
		return
	}
	content, enc := string(b), "utf-8"
	if !utf8.Valid(b) {
		content, enc = base64.StdEncoding.EncodeToString(b), "base64"
	}
	out["content"], out["encoding"], out["size"] = content, enc, len(b)
	api.OK(ctx, out)
}

// v2Upload answers POST /v2/fs/upload, multipart: part "file" and an
// optional text part "path" (a file path, or a folder ending in "/").
func (s *server) v2Upload(ctx *fasthttp.RequestCtx) {
	up, fe := s.readUpload(ctx)
	if fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	fsys, ok := s.viewFor(ctx)
	if !ok {
		return
	}
	p, ok := s.resolveV2(ctx, fsys, "path", s.destIn(fsys, up))
	if !ok {
		return
	}
	n, err := saveUpload(fsys, up.file, p, up.overwrite)
	if err != nil {
		s.failV2(ctx, "upload", p, err)
		return
	}
	api.OK(ctx, map[string]any{"path": p, "size": n})
}

// v2Delete answers DELETE /v2/fs/delete?path=[&recursive=true]. A non-empty
// folder needs recursive; "/" and Root itself are never deleted.
func (s *server) v2Delete(ctx *fasthttp.RequestCtx) {
	fsys, p, ok := s.queryPathV2(ctx)
	if !ok {
		return
	}
	q := queryFields(ctx)
	recursive := q.Bool("recursive", false)
	if fe := q.Err(); fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	if err := s.remove(fsys, p, recursive); err != nil {
		s.failV2(ctx, "delete", p, err)
		return
	}
	api.OK(ctx, map[string]any{"path": p, "deleted": true})
}

func (s *server) remove(fsys FS, p string, recursive bool) error {
	if p == "/" || (s.root != "" && p == s.root) {
		return &fsErr{kind: kindTarget, exc: "OSError", msg: "refusing to delete " + p}
	}
	fi, err := fsys.Lstat(p)
	if err != nil {
		return err
	}
	if recursive && fi.IsDir() {
		return fsys.RemoveAll(p)
	}
	err = fsys.Remove(p)
	if fi.IsDir() && (errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)) {
		return &fsErr{kind: kindTarget, errno: syscall.ENOTEMPTY, exc: "OSError",
			msg: "directory not empty; pass recursive=true to delete it with its contents"}
	}
	return err
}
