package fsplane

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/valyala/fasthttp"
)

// The error_type values of the SDK's FileOperationError.
const (
	kindNotFound    = "not_found"
	kindPermission  = "permission_denied"
	kindTarget      = "invalid_target"
	kindExists      = "already_exists"
	kindInvalidPath = "invalid_path"
	kindReadOnly    = "read_only_filesystem"
	kindNoSpace     = "no_space_left"
	kindDecode      = "decode_error"
	kindIO          = "io_error"
)

// fsErr is a failure aiod detects itself (a relative path, a directory where
// a file is needed, a file over the read limit). errno is 0 when no system
// error number fits; exc is the Python exception the original server raises.
type fsErr struct {
	kind  string
	errno syscall.Errno
	exc   string
	msg   string
}

func (e *fsErr) Error() string { return e.msg }

// The constructors below name no path: fileError and failV2 put the
// operation and the path in front of the reason.

func errIsDir() error {
	return &fsErr{kind: kindTarget, errno: syscall.EISDIR, exc: "IsADirectoryError", msg: "is a directory"}
}

func errNotDir() error {
	return &fsErr{kind: kindTarget, errno: syscall.ENOTDIR, exc: "NotADirectoryError", msg: "not a directory"}
}

func errExists() error {
	return &fsErr{kind: kindExists, errno: syscall.EEXIST, exc: "FileExistsError", msg: "already exists"}
}

func errTooLarge(limit int64) error {
	return &fsErr{kind: kindIO, errno: syscall.EFBIG, exc: "OSError",
		msg: "file is larger than the " + humanBytes(limit) + " read limit; read a line range (start_line and end_line) or use the download route"}
}

func errDecode(offset int) error {
	return &fsErr{kind: kindDecode, exc: "UnicodeDecodeError",
		msg: "not valid UTF-8 text (invalid byte at offset " + itoa(offset) + "); use the download route or base64"}
}

// FileOperationError is the SDK's structured failure, sent as data with
// success false. Every key is always present; errno and errno_name are null
// when no system error number applies.
type FileOperationError struct {
	Path          string  `json:"path"`
	Operation     string  `json:"operation"`
	Message       string  `json:"message"`
	ErrorType     string  `json:"error_type"`
	Retryable     bool    `json:"retryable"`
	Errno         *int    `json:"errno"`
	ErrnoName     *string `json:"errno_name"`
	ExceptionType string  `json:"exception_type"`
}

// classified is what aiod knows about a failure.
type classified struct {
	kind      string
	errno     syscall.Errno
	exc       string
	reason    string
	retryable bool
}

// classify maps a Go error to an error_type, preferring the system errno.
func classify(err error) classified {
	var fe *fsErr
	if errors.As(err, &fe) {
		return classified{kind: fe.kind, errno: fe.errno, exc: fe.exc, reason: fe.msg}
	}
	reason := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		reason = pe.Err.Error()
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		c := classifyErrno(en)
		c.reason = reason
		return c
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return classified{kind: kindNotFound, errno: syscall.ENOENT, exc: "FileNotFoundError", reason: reason}
	case errors.Is(err, fs.ErrPermission):
		return classified{kind: kindPermission, errno: syscall.EACCES, exc: "PermissionError", reason: reason}
	case errors.Is(err, fs.ErrExist):
		return classified{kind: kindExists, errno: syscall.EEXIST, exc: "FileExistsError", reason: reason}
	}
	return classified{kind: kindIO, exc: "OSError", reason: reason}
}

func classifyErrno(en syscall.Errno) classified {
	c := classified{errno: en, kind: kindIO, exc: "OSError"}
	switch en {
	case syscall.ENOENT:
		c.kind, c.exc = kindNotFound, "FileNotFoundError"
	case syscall.EACCES, syscall.EPERM:
		c.kind, c.exc = kindPermission, "PermissionError"
	case syscall.EEXIST:
		c.kind, c.exc = kindExists, "FileExistsError"
	case syscall.EISDIR:
		c.kind, c.exc = kindTarget, "IsADirectoryError"
	case syscall.ENOTDIR:
		c.kind, c.exc = kindTarget, "NotADirectoryError"
	case syscall.ENOTEMPTY, syscall.ETXTBSY, syscall.EXDEV:
		c.kind = kindTarget
	case syscall.EROFS:
		c.kind = kindReadOnly
	case syscall.ENOSPC, syscall.EDQUOT:
		c.kind = kindNoSpace
	case syscall.ENAMETOOLONG, syscall.EINVAL, syscall.ELOOP:
		c.kind = kindInvalidPath
	case syscall.EAGAIN, syscall.EINTR, syscall.EBUSY, syscall.EMFILE, syscall.ENFILE:
		c.retryable = true
		if en == syscall.EAGAIN || en == syscall.EINTR {
			c.exc = "BlockingIOError"
		}
	}
	return c
}

// fileError builds the v1 data for a failed operation on path.
func fileError(op, path string, err error) *FileOperationError {
	c := classify(err)
	out := &FileOperationError{
		Path:          path,
		Operation:     op,
		Message:       op + " " + path + ": " + c.reason,
		ErrorType:     c.kind,
		Retryable:     c.retryable,
		ExceptionType: c.exc,
	}
	if c.errno != 0 {
		n := int(c.errno)
		name := errnoName(c.errno)
		out.Errno, out.ErrnoName = &n, &name
	}
	return out
}

// v2Status is the HTTP status a v2 route answers for a classified failure.
func v2Status(c classified) int {
	switch c.kind {
	case kindNotFound:
		return fasthttp.StatusNotFound
	case kindPermission, kindReadOnly:
		return fasthttp.StatusForbidden
	case kindExists:
		return fasthttp.StatusConflict
	case kindTarget, kindInvalidPath, kindDecode:
		return fasthttp.StatusUnprocessableEntity
	case kindNoSpace:
		return fasthttp.StatusInsufficientStorage
	}
	if c.errno == syscall.EFBIG {
		return fasthttp.StatusRequestEntityTooLarge
	}
	return fasthttp.StatusInternalServerError
}

var errnoNames = map[syscall.Errno]string{
	syscall.ENOENT: "ENOENT", syscall.EACCES: "EACCES", syscall.EPERM: "EPERM",
	syscall.EEXIST: "EEXIST", syscall.EISDIR: "EISDIR", syscall.ENOTDIR: "ENOTDIR",
	syscall.ENOTEMPTY: "ENOTEMPTY", syscall.ETXTBSY: "ETXTBSY", syscall.EXDEV: "EXDEV",
	syscall.EROFS: "EROFS", syscall.ENOSPC: "ENOSPC", syscall.EDQUOT: "EDQUOT",
	syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.EINVAL: "EINVAL", syscall.ELOOP: "ELOOP",
	syscall.EAGAIN: "EAGAIN", syscall.EINTR: "EINTR", syscall.EBUSY: "EBUSY",
	syscall.EMFILE: "EMFILE", syscall.ENFILE: "ENFILE", syscall.EIO: "EIO",
	syscall.EFBIG: "EFBIG",
}

func errnoName(en syscall.Errno) string {
	if n, ok := errnoNames[en]; ok {
		return n
	}
	return "errno_" + itoa(int(en))
}
