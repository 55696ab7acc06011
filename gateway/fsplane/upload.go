package fsplane

import (
	"errors"
	"io"
	"io/fs"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
)

// upload is a parsed multipart upload: the file part and where it goes.
type upload struct {
	file      *multipart.FileHeader
	name      string // the part's file name reduced to one element
	dest      string // as sent, "" for none; see destIn
	overwrite bool   // an existing file may be replaced
}

// readUpload parses the multipart body: part "file" is required; text parts
// "path" and "overwrite" are optional ("overwrite" may also come in the
// query). Where it goes is destIn's choice.
func (s *server) readUpload(ctx *fasthttp.RequestCtx) (upload, *api.FieldError) {
	var form *multipart.Form
	var err error
	if s.maxBody > 0 {
		form, err = ctx.MultipartFormWithLimit(int(s.maxBody))
	} else {
		form, err = ctx.MultipartForm()
	}
	if err != nil {
		return upload{}, &api.FieldError{In: "body", Field: "file", Type: "missing",
			Msg: "a multipart/form-data body with a 'file' part is required: " + err.Error()}
	}
	fhs := form.File["file"]
	if len(fhs) == 0 {
		return upload{}, &api.FieldError{In: "body", Field: "file", Type: "missing", Msg: "Field required"}
	}
	name := safeName(fhs[0].Filename)
	dest := ""
	if v := form.Value["path"]; len(v) > 0 {
		dest = v[0]
	}
	over := api.FromMap("body", map[string]string{})
	if v := form.Value["overwrite"]; len(v) > 0 {
		over = api.FromMap("body", map[string]string{"overwrite": v[0]})
	} else if q := ctx.QueryArgs().Peek("overwrite"); q != nil {
		over = api.FromMap("query", map[string]string{"overwrite": string(q)})
	}
	overwrite := over.Bool("overwrite", false)
	if fe := over.Err(); fe != nil {
		return upload{}, fe
	}
	return upload{file: fhs[0], name: name, dest: dest, overwrite: overwrite}, nil
}

// destIn is where the upload goes in fsys, not yet resolved (a relative
// path is refused then). Without a path the file lands in the workspace
// (the daemon's --workdir) under its own name; a path ending in "/" or
// naming a folder receives it by name.
func (s *server) destIn(fsys FS, up upload) string {
	switch dest := up.dest; {
	case dest == "":
		return filepath.Join(s.workspace, up.name)
	case strings.HasSuffix(dest, "/"):
		return filepath.Join(dest, up.name)
	case filepath.IsAbs(dest):
		if fi, err := fsys.Stat(filepath.Clean(dest)); err == nil && fi.IsDir() {
			return filepath.Join(dest, up.name)
		}
		return dest
	default:
		return dest
	}
}

// safeName reduces a client's file name to one path element.
func safeName(name string) string {
	name = strings.ReplaceAll(strings.ReplaceAll(name, "\\", "/"), "\x00", "")
	base := filepath.Base(name)
	if base == "." || base == ".." || base == "/" || base == "" {
		return "upload"
	}
	return base
}

// saveUpload copies the uploaded part to dest in fsys, creating parent
// folders, and returns the bytes written. Unless overwrite is set, an
// existing dest is left alone and the answer is "exists".
func saveUpload(fsys FS, fh *multipart.FileHeader, dest string, overwrite bool) (int64, error) {
	if _, err := checkWritable(fsys, dest); err != nil {
		return 0, err
	}
	src, err := fh.Open()
	if err != nil {
		return 0, err
	}
	defer src.Close()
	if err := fsys.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return 0, err
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if !overwrite {
		flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL
	}
	out, err := openWrite(fsys, dest, flags)
	if errors.Is(err, fs.ErrExist) {
		return 0, &fsErr{kind: kindExists, errno: syscall.EEXIST, exc: "FileExistsError",
			msg: "already exists; send overwrite=true to replace it"}
	}
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
