package fsplane

import (
	"encoding/base64"
	"unicode/utf8"
)

// Files is the file plane as functions, for callers that are not HTTP
// routes (the MCP tools). It follows the v2 routes' rules: absolute paths,
// Config.Root, the read limit; its results are the v2 routes' data. Its
// paths lead to HostFS unless For gives the caller's view.
type Files struct {
	s    *server
	fsys FS
}

// NewFiles returns the file plane's functions for cfg, acting on HostFS
// with cfg.Workspace. cfg.View is not used: see For.
func NewFiles(cfg Config) *Files {
	s := newServer(cfg)
	return &Files{s: s, fsys: s.host}
}

// For returns the same functions acting in fsys, a caller's view; nil
// means HostFS. As with Config.View, pass the same FS value for the same
// caller.
func (f *Files) For(fsys FS) *Files {
	if fsys == nil {
		fsys = f.s.host
	}
	return &Files{s: f.s, fsys: fsys}
}

// Error is a failed file operation: the HTTP status the v2 route answers
// for it, the SDK's error_type, and a message naming the operation, the
// path and the reason.
type Error struct {
	Status int
	Kind   string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func (f *Files) fail(op, path string, err error) *Error {
	c := classify(err)
	f.s.logUnexpected(op, path, c.kind, err)
	status := v2Status(c)
	if c.kind == kindInvalidPath {
		status = 422
	}
	return &Error{Status: status, Kind: c.kind, Msg: op + " " + path + ": " + c.reason}
}

// Read reads a whole file (up to the read limit): {path, content, encoding,
// size}, the content as UTF-8 text or, when it is not valid UTF-8, base64.
func (f *Files) Read(path string) (map[string]any, error) {
	p, err := f.s.resolve(f.fsys, path)
	if err != nil {
		return nil, f.fail("read", path, err)
	}
	b, err := readAll(f.fsys, p, maxRead)
	if err != nil {
		return nil, f.fail("read", p, err)
	}
	content, enc := string(b), "utf-8"
	if !utf8.Valid(b) {
		content, enc = base64.StdEncoding.EncodeToString(b), "base64"
	}
	return map[string]any{"path": p, "content": content, "encoding": enc, "size": len(b)}, nil
}

// Write writes content ("utf-8", the default, or "base64") to path,
// creating parent folders, or appends it: {path, size, created, append}.
func (f *Files) Write(path, content, encoding string, appendMode bool) (map[string]any, error) {
	data, fe := decodeContent(content, encoding, false)
	if fe != nil {
		return nil, &Error{Status: 422, Kind: "invalid_field", Msg: fe.Field + " " + fe.Msg}
	}
	p, err := f.s.resolve(f.fsys, path)
	if err != nil {
		return nil, f.fail("write", path, err)
	}
	created, err := writeFile(f.fsys, p, data, appendMode)
	if err != nil {
		return nil, f.fail("write", p, err)
	}
	return map[string]any{"path": p, "size": len(data), "created": created, "append": appendMode}, nil
}

// List lists a folder sorted by name: {path, files: [{name, path, size,
// is_dir, modified}]}.
func (f *Files) List(path string) (map[string]any, error) {
	p, err := f.s.resolve(f.fsys, path)
	if err != nil {
		return nil, f.fail("list", path, err)
	}
	entries, err := readDirEntries(f.fsys, p)
	if err != nil {
		return nil, f.fail("list", p, err)
	}
	files := make([]map[string]any, 0, len(entries))
	for _, e := range entries {
		files = append(files, map[string]any{
			"name": e.name, "path": e.path, "size": e.info.Size(),
			"is_dir": e.isDir, "modified": rfc3339(e.info.ModTime()),
		})
	}
	return map[string]any{"path": p, "files": files}, nil
}
