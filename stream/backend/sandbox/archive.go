package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"strings"
	"syscall"
	"time"
)

// ErrArchiveTooLarge is ArchiveFiles's error when the tenant's files take
// more than the bound it was given.
var ErrArchiveTooLarge = errors.New("the tenant's files are larger than the bound")

// tarPath is GNU tar, which archives and extracts a tenant's files.
const tarPath = "/usr/bin/tar"

// archiveRoots are the tenant's own writable folders as its view shows
// them, relative to "/": HOME, the working folder when apart, /tmp and
// /var/tmp (/dev/shm is memory and is not kept).
func (t *Tenant) archiveRoots() []string {
	v := t.View()
	roots := []string{strings.TrimPrefix(v.HomePath, "/")}
	if v.WorkPath != "" && !under(v.WorkPath, v.HomePath) {
		roots = append(roots, strings.TrimPrefix(v.WorkPath, "/"))
	}
	return append(roots, "tmp", "var/tmp")
}

// ArchiveFiles writes a tar of the tenant's own files (archiveRoots) to w
// and returns its size. GNU tar makes it in the tenant's view, as the
// tenant's uid, under the file helper's plan: it reads nothing the
// tenant's runtimes could not, whatever links they left. Past max bytes it
// stops with ErrArchiveTooLarge.
func (t *Tenant) ArchiveFiles(ctx context.Context, w io.Writer, max int64) (int64, error) {
	args := []string{"-C", "/", "-cf", "-", "--ignore-failed-read", "--warning=no-file-changed",
		"--warning=no-file-ignored", "--warning=no-file-removed", "--"}
	cw := &boundWriter{w: w, left: max}
	err := t.runTar(ctx, append(args, t.archiveRoots()...), nil, cw)
	var exit *exec.ExitError
	switch {
	case cw.over:
		return cw.n, ErrArchiveTooLarge
	case errors.As(err, &exit) && exit.ExitCode() == 1 && ctx.Err() == nil:
		// "Some files differ": one changed while it was read. The archive
		// is whole; that file is as tar found it.
		return cw.n, nil
	case err != nil:
		return cw.n, err
	}
	return cw.n, nil
}

// RestoreFiles extracts a tar that ArchiveFiles made into the tenant's
// files, by GNU tar in the tenant's view as its uid: a member can land
// only where the tenant's runtimes could write (its own folders; the rest
// of the view is read-only), and tar refuses absolute names and "..".
// Files of the same name are replaced; others are kept.
func (t *Tenant) RestoreFiles(ctx context.Context, r io.Reader) error {
	return t.runTar(ctx, []string{"-C", "/", "-xf", "-", "--no-same-owner", "--no-overwrite-dir", "--delay-directory-restore"}, r, io.Discard)
}

// runTar runs tar with args in the tenant's view, stdin from in (nil:
// none) and stdout to out, and waits for it, bounded by ctx.
func (t *Tenant) runTar(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	cmd := exec.CommandContext(ctx, tarPath, args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.Stdin, cmd.Stdout = in, out
	errs := &tail{}
	cmd.Stderr = errs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	Wrap(cmd, t.View().FilesPlan(), nil)
	if err := cmd.Run(); err != nil {
		if s := strings.TrimSpace(errs.String()); s != "" {
			err = fmt.Errorf("%s: %w: %s", path.Base(tarPath), err, s)
		}
		return err
	}
	return nil
}

// boundWriter passes at most left bytes on to w; past them it fails (and
// says so in over).
type boundWriter struct {
	w    io.Writer
	left int64
	n    int64
	over bool
}

func (b *boundWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		b.over = true
		return 0, ErrArchiveTooLarge
	}
	n, err := b.w.Write(p)
	b.left -= int64(n)
	b.n += int64(n)
	return n, err
}
