// Package fsplane serves aiod's file plane: the v2 routes under /v2/fs/ (the
// envelope of spec/v2-code-plane.md) and the v1 routes under /v1/file/ (the
// agent_sandbox SDK models of spec/v1-compat.md §8).
//
// The host is the sandbox, so by default no absolute path is forbidden; what
// a kernel writes is visible here at once because both see the same disk.
// Config.Root narrows every route to one folder tree.
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
	"log/slog"
	"os"
	"sync"

	"github.com/fasthttp/router"
)

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
	// Workspace is where the upload routes put a file sent without a path
	// (the daemon passes its --workdir). Empty means $WORKSPACE, else the
	// user's home, else the temp folder.
	Workspace string
}

// server holds what every handler shares. The fields are set once in
// Register; history is safe for concurrent use.
type server struct {
	maxBody   int64
	log       *slog.Logger
	root      string // symlink-resolved Config.Root, "" for none
	workspace string
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
	return s
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
