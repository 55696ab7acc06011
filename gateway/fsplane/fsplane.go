// Package fsplane serves aiod's file plane: the v2 routes under /v2/fs/ (the
// envelope of docs/v2-contract.md) and the v1 routes under /v1/file/ (the
// agent_sandbox SDK models of docs/v1-compat.md).
//
// The host is the sandbox, so by default no absolute path is forbidden; what
// a kernel writes is visible here at once because both see the same disk.
// Config.Root narrows every route to one folder tree.
//
// Every file access goes through an FS picked per request (Config.View):
// HostFS, aiod's own view with its own rights, unless the hook gives the
// caller's. HostFS follows no symbolic link out of the working folder and
// no route reads or writes anything but a regular file (special.go).
//
// Failure shapes differ by version on purpose:
//   - v2 answers an HTTP status (404 missing, 403 denied, 422 bad input or
//     wrong kind of target, 409 exists, 413 too large) with the envelope and
//     data null.
//   - v1 answers HTTP 200, success false, and data = a complete
//     FileOperationError for every expected file-system failure; only bad
//     request fields get a 422, in FastAPI's detail shape. The download route
//     is the exception the SDK expects: HTTP statuses, never 200 on failure.
//
// Every "sudo" field is accepted and ignored: aiod runs as its own user and
// never escalates.
package fsplane

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"sync"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/fsplane/fsview"
)

// FS is where a request's paths lead (package fsys): the host, or the
// caller's view of it.
type FS = fsview.FS

// HostFS is the host with aiod's own rights (package fsys).
type HostFS = fsview.HostFS

// NewHostFS is the host's view for runtimes that start in workspace.
func NewHostFS(workspace string) *HostFS { return fsview.NewHostFS(workspace) }

// Config configures the file plane. The zero value is usable.
type Config struct {
	// MaxBody is the server's request body limit in bytes. fasthttp enforces
	// it for every request; the upload routes also pass it to the multipart
	// parser. Zero means no limit here.
	MaxBody int64
	// Logger receives unexpected I/O failures. Nil discards them.
	Logger *slog.Logger
	// Root, when set, confines every path to this folder tree (symlinks
	// resolved); anything else is permission_denied (v1) or 403 (v2). Empty
	// means no restriction.
	Root string
	// Workspace is the working folder (the daemon passes its --workdir):
	// the upload routes put a file sent without a path there, and HostFS
	// follows no symbolic link out of it. Empty means $WORKSPACE, else the
	// user's home, else the temp folder.
	Workspace string
	// View picks the file system a request's paths lead to: the caller's
	// view once callers are isolated. It returns the same FS value for the
	// same caller, of a comparable type such as a pointer (the editor's
	// undo history is kept per FS), or an error, which answers 503 naming
	// it. Nil means HostFS with Workspace for every request. Files does not
	// call it: its caller passes the FS to Files.For.
	View func(ctx *fasthttp.RequestCtx) (FS, error)
}

// server holds what every handler shares. The fields are set once in
// Register; history is safe for concurrent use.
type server struct {
	maxBody   int64
	log       *slog.Logger
	root      string // symlink-resolved Config.Root, "" for none
	workspace string
	host      *HostFS
	viewHook  func(*fasthttp.RequestCtx) (FS, error) // Config.View; nil: host
	history   *history

	editMu sync.Mutex // serialises str_replace_editor commands
}

// Register adds the file plane's routes to r.
func Register(r *router.Router, cfg Config) {
	s := newServer(cfg)
	r.POST("/v2/fs/write", s.v2Write)
	r.GET("/v2/fs/list", s.v2List)
	r.GET("/v2/fs/download", s.v2Download)
	r.GET("/v2/fs/read", s.v2Read)
	r.POST("/v2/fs/read", s.v2Read)
	r.POST("/v2/fs/upload", s.v2Upload)
	r.DELETE("/v2/fs/delete", s.v2Delete)

	r.POST("/v1/file/read", s.v1Read)
	r.POST("/v1/file/write", s.v1Write)
	r.POST("/v1/file/list", s.v1List)
	r.GET("/v1/file/download", s.v1Download)
	r.POST("/v1/file/upload", s.v1Upload)
	r.POST("/v1/file/replace", s.v1Replace)
	r.POST("/v1/file/search", s.v1Search)
	r.POST("/v1/file/find", s.v1Find)
	r.POST("/v1/file/grep", s.v1Grep)
	r.POST("/v1/file/glob", s.v1Glob)
	r.POST("/v1/file/str_replace_editor", s.v1Editor)
}

func newServer(cfg Config) *server {
	s := &server{
		maxBody:   cfg.MaxBody,
		log:       cfg.Logger,
		workspace: cfg.Workspace,
		viewHook:  cfg.View,
		history:   newHistory(historyPerPath, historyBytes),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Root != "" {
		s.root = resolveRoot(cfg.Root)
	}
	if s.workspace == "" {
		s.workspace = defaultWorkspace()
	}
	s.host = NewHostFS(s.workspace)
	return s
}

// viewFor picks the request's file system. When Config.View fails it has
// answered 503 with the reason, and ok is false.
func (s *server) viewFor(ctx *fasthttp.RequestCtx) (fsys FS, ok bool) {
	if s.viewHook == nil {
		return s.host, true
	}
	fsys, err := s.viewHook(ctx)
	switch {
	case err != nil:
	case fsys == nil:
		err = errors.New("the view hook returned no file system")
	case !reflect.TypeOf(fsys).Comparable():
		err = fmt.Errorf("the view hook returned a %T, which is not comparable", fsys)
	default:
		return fsys, true
	}
	s.log.Warn("file plane: no file system for the request", "path", string(ctx.Path()), "err", err)
	api.Fail(ctx, fasthttp.StatusServiceUnavailable, "the caller's file system is not available: "+err.Error())
	return nil, false
}

func defaultWorkspace() string {
	if w := os.Getenv("WORKSPACE"); w != "" {
		return w
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return h
	}
	return os.TempDir()
}
