package fsplane

import (
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
)

// editorResult is the SDK's StrReplaceEditorResult.
type editorResult struct {
	Output     string         `json:"output"`
	Error      *string        `json:"error"`
	Path       string         `json:"path"`
	PrevExist  bool           `json:"prev_exist"`
	OldContent *string        `json:"old_content"`
	NewContent *string        `json:"new_content"`
	Metadata   map[string]any `json:"metadata"`
}

// fail marks the result as a refused edit: the file is unchanged and error
// says why (e.g. old_str not unique). The envelope has success false.
func (r *editorResult) fail(msg string) *editorResult {
	r.Error = &msg
	return r
}

// editReq is a validated str_replace_editor request.
type editReq struct {
	fsys                     FS // where path leads
	command, path            string
	fileText, oldStr, newStr *string
	insertLine               int64
	viewRange                []int64
	mode                     string // "", ALL, FIRST or LAST
	meta                     bool
}

var editCommands = map[string]bool{"view": true, "create": true, "str_replace": true, "insert": true, "undo_edit": true}

func readEditReq(f *api.Fields) (editReq, *api.FieldError) {
	r := editReq{
		command: f.Str("command", true), path: f.Str("path", true),
		fileText: f.OptStr("file_text"), oldStr: f.OptStr("old_str"), newStr: f.OptStr("new_str"),
		viewRange: f.IntList("view_range"), mode: strings.ToUpper(f.Str("replace_mode", false)),
		meta: f.Bool("enable_metadata", false),
	}
	line, hasLine := f.Int("insert_line")
	r.insertLine = line
	// Document options (pages, sheets, rows, slides) are accepted and unused.
	f.IntList("page_range")
	f.IntList("row_range")
	f.IntList("slide_range")
	f.Str("sheet_name", false)
	if fe := f.Err(); fe != nil {
		return r, fe
	}
	switch {
	case !editCommands[r.command]:
		return r, &api.FieldError{In: "body", Field: "command", Type: "literal_error",
			Msg: "must be 'view', 'create', 'str_replace', 'insert' or 'undo_edit', got " + quote(r.command)}
	case r.mode != "" && r.mode != "ALL" && r.mode != "FIRST" && r.mode != "LAST":
		return r, &api.FieldError{In: "body", Field: "replace_mode", Type: "literal_error",
			Msg: "must be 'ALL', 'FIRST' or 'LAST', got " + quote(r.mode)}
	case r.viewRange != nil && len(r.viewRange) != 2:
		return r, badField("view_range", "must be two line numbers [start, end]; end -1 means the last line")
	case r.command == "create" && r.fileText == nil:
		return r, missing("file_text", "create")
	case r.command == "str_replace" && r.oldStr == nil:
		return r, missing("old_str", "str_replace")
	case r.command == "insert" && !hasLine:
		return r, missing("insert_line", "insert")
	case r.command == "insert" && r.newStr == nil:
		return r, missing("new_str", "insert")
	}
	return r, nil
}

// histKey names a file in the undo history: its path in one file system.
// FS values are compared (the View hook returns one per caller), so an FS
// is a pointer or another comparable type.
type histKey struct {
	fsys FS
	path string
}

func (r editReq) key() histKey { return histKey{r.fsys, r.path} }

func missing(field, command string) *api.FieldError {
	return &api.FieldError{In: "body", Field: field, Type: "missing", Msg: "Field required for command " + command}
}

// v1Editor answers POST /v1/file/str_replace_editor. A refused edit (old_str
// missing or not unique, a bad line number, nothing to undo) answers
// success false with the result model and its error set; a file-system
// failure (not found, create over an existing file, a folder where a file
// is needed) answers a FileOperationError. Edits are serialised.
func (s *server) v1Editor(ctx *fasthttp.RequestCtx) {
	f := decodeV1(ctx)
	if f == nil {
		return
	}
	req, fe := readEditReq(f)
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	fsys, p, ok := s.pathV1(ctx, req.command, req.path)
	if !ok {
		return
	}
	req.fsys, req.path = fsys, p
	s.editMu.Lock()
	res, err := s.edit(req)
	s.editMu.Unlock()
	if err != nil {
		s.failV1(ctx, req.command, p, err)
		return
	}
	if req.meta {
		res.Metadata = fileMeta(fsys, p)
	}
	if res.Error != nil {
		api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: false, Message: *res.Error, Data: res})
		return
	}
	okV1(ctx, "ok", res)
}

func (s *server) edit(r editReq) (*editorResult, error) {
	_, statErr := r.fsys.Lstat(r.path)
	res := &editorResult{Path: r.path, PrevExist: statErr == nil}
	switch r.command {
	case "view":
		return res, s.view(r, res)
	case "create":
		return res, s.create(r, res)
	case "str_replace":
		return res, s.strReplace(r, res)
	case "insert":
		return res, s.insert(r, res)
	}
	return res, s.undo(r, res)
}

// fileMeta is the metadata of enable_metadata: what the file is after the
// command.
func fileMeta(fsys FS, p string) map[string]any {
	fi, err := fsys.Stat(p)
	if err != nil {
		return map[string]any{"exists": false}
	}
	return map[string]any{"exists": true, "size": fi.Size(), "is_directory": fi.IsDir(),
		"modified_time": rfc3339(fi.ModTime())}
}
