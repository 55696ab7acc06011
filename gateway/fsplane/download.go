package fsplane

import (
	"errors"
	"io"
	"mime"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// errChanged is the download's 409: with change_policy=abort, the file
// changed between the stat and the open.
var errChanged = errors.New("file changed while the download was starting")

// sendFile streams path in fsys as the response body with its size known.
// It returns an error only before anything is sent; the caller answers it
// as JSON. With abort set, a file whose size or mtime moves between the
// first stat and the open is errChanged, and one that moves while
// streaming cuts the transfer (the client sees a broken stream, as the SDK
// docs describe). A kernel pseudo-file, whose stated size is not its
// length, is read into memory first (at most maxRead bytes).
func sendFile(ctx *fasthttp.RequestCtx, fsys FS, path string, abort bool) error {
	var before os.FileInfo
	if abort {
		fi, err := fsys.Stat(path)
		if err != nil {
			return err
		}
		before = fi
	}
	src, err := openFile(fsys, path)
	if err != nil {
		return err
	}
	fi := src.info
	if abort && !sameVersion(before, fi) {
		src.Close()
		return errChanged
	}
	if src.pseudo != "" {
		b, err := io.ReadAll(io.LimitReader(src, maxRead+1))
		src.Close()
		if err == nil && len(b) > maxRead {
			err = errTooLarge(maxRead)
		}
		if err != nil {
			return err
		}
		setDownloadHeaders(ctx, path, fi)
		ctx.SetBody(b)
		return nil
	}
	setDownloadHeaders(ctx, path, fi)
	if abort {
		// Not an *os.File, so fasthttp reads it through and probes for EOF,
		// where the guard re-checks the file.
		ctx.SetBodyStream(&guardedFile{f: src.f, fsys: fsys, path: path, size: fi.Size(), mtime: fi.ModTime()}, int(fi.Size()))
		return nil
	}
	ctx.SetBodyStream(src.f, int(fi.Size())) // fasthttp closes the file when done
	return nil
}

func setDownloadHeaders(ctx *fasthttp.RequestCtx, path string, fi os.FileInfo) {
	ct := mime.TypeByExtension(filepath.Ext(path))
	if ct == "" {
		ct = "application/octet-stream"
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(ct)
	ctx.Response.Header.Set("Content-Disposition", contentDisposition(filepath.Base(path)))
	ctx.Response.Header.SetLastModified(fi.ModTime())
}

func sameVersion(a, b os.FileInfo) bool {
	return a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// guardedFile fails the read at end of file when the file on disk no longer
// has the size and mtime it had when the download started.
type guardedFile struct {
	f     *os.File
	fsys  FS // where path is re-checked
	path  string
	size  int64
	mtime time.Time
}

func (g *guardedFile) Read(p []byte) (int, error) {
	n, err := g.f.Read(p)
	if errors.Is(err, io.EOF) {
		fi, serr := g.fsys.Stat(g.path)
		if serr != nil || fi.Size() != g.size || !fi.ModTime().Equal(g.mtime) {
			return n, errChanged
		}
	}
	return n, err
}

func (g *guardedFile) Close() error { return g.f.Close() }

// contentDisposition builds `attachment; filename="name"`. Quotes and
// backslashes are escaped; a name that is not plain printable ASCII gets an
// ASCII stand-in there plus the exact name as RFC 5987 filename*.
func contentDisposition(name string) string {
	var fb strings.Builder
	for _, r := range name {
		switch {
		case r < 0x20 || r >= 0x7f:
			fb.WriteByte('_')
		default:
			fb.WriteRune(r)
		}
	}
	fallback := fb.String()
	escaped := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(fallback)
	v := `attachment; filename="` + escaped + `"`
	if fallback != name {
		v += "; filename*=UTF-8''" + rfc5987(name)
	}
	return v
}

// rfc5987 percent-encodes every byte that is not an attr-char.
func rfc5987(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isAttrChar(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

func isAttrChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$&+-.^_`|~", c) >= 0
}
