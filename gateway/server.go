// Package gateway is aiod's HTTP server: its configuration, the guard in
// front of every route, and the wiring of the surfaces, which all run on
// one call core (package call) over the session registry of package
// stream. It serves the v2 code routes, discovery, metrics and the
// notebook page itself; the other surfaces are packages of their own
// (v1, live, jupyterapi, mcp, fsplane), and none imports another.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/gateway/cluster"
	"github.com/aiod/aiod/gateway/fsplane"
	"github.com/aiod/aiod/gateway/fsplane/watch"
	"github.com/aiod/aiod/gateway/fswatch"
	"github.com/aiod/aiod/gateway/guard"
	"github.com/aiod/aiod/gateway/jupyterapi"
	"github.com/aiod/aiod/gateway/live"
	"github.com/aiod/aiod/gateway/mcp"
	"github.com/aiod/aiod/gateway/observe"
	"github.com/aiod/aiod/gateway/shell"
	"github.com/aiod/aiod/gateway/terminals"
	v1 "github.com/aiod/aiod/gateway/v1"
	v2 "github.com/aiod/aiod/gateway/v2"
	"github.com/aiod/aiod/gateway/wsock"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/execution"
	"github.com/aiod/aiod/stream/snapshot"
)

// Version is aiod's version, reported by discovery routes.
var Version = "0.1.0"

// Config is everything the gateway needs. Zero values take the defaults
// documented on each field (the daemon's flags set them all).
type Config struct {
	DefaultTimeout          time.Duration     // 30 s
	MaxTimeout              time.Duration     // 900 s
	KernelIdle              time.Duration     // 300 s: idle kernel sessions are reclaimed
	TenantIdle              time.Duration     // 600 s: idle tenants that run nothing are let go; below 0 never
	NativeIdle              time.Duration     // 1800 s: idle native REPL sessions are reclaimed
	OutputBudget            int               // bytes of output kept per execution; 8 MiB
	MaxBody                 int               // largest request body; 64 MiB
	HeldCodeTenant          int64             // code bytes one tenant's calls hold while they wait or run (call.HeldTenantFlag); 0 none
	HeldCodeTotal           int64             // the same for all calls together (call.HeldTotalFlag); 0 none
	CodeBackend             string            // auto, native or kernel
	KernelName              string            // kernelspec for Python; "" picks python3 or the first ipykernel
	KernelStartTimeout      time.Duration     // 60 s
	NativeStartTimeout      time.Duration     // bound on a native REPL's start; 10 s
	Workdir                 string            // working directory of runtimes; "" is the daemon's
	ReapInterval            time.Duration     // how often idle sessions are looked for; 5 s
	JupyterEndpoint         string            // AIO_JUPYTER_ENDPOINT: a Jupyter server to run Python kernels on
	JupyterToken            string            // its token, sent as "Authorization: token T"
	JupyterKernel           string            // kernelspec on that server; "" is its default
	JupyterStartTimeout     time.Duration     // bound on a remote kernel start; 120 s
	JupyterProbeInterval    time.Duration     // how often the server is probed; 30 s
	KernelPrewarm           int               // Python kernels kept started and ready; 0 none
	CodePrewarm             int               // native REPL processes kept ready per language; 0 none
	NoKernelWarmup          bool              // do not import pandas and matplotlib in pooled kernels (nor in kernel templates)
	KernelStart             string            // fork (from a warm template per kernelspec) or spawn; "" is fork
	KernelTransport         string            // ipc or tcp for local kernels; "" is ipc for ipykernel specs, tcp for others
	WSQueueBytes            int               // bytes that may wait for one WebSocket before it is cut; 16 MiB
	WriteTimeout            time.Duration     // bound on writing one batch to a WebSocket or a streamed answer before it is cut; 10 s
	LiveLimits              wsock.Limits      // the WebSocket routes' other limits (write timeout, pings, executions in flight); WSQueueBytes, when set, is its QueueBytes
	NoAccessLog             bool              // do not log a line per request (--access-log=false)
	AccessLogger            *slog.Logger      // where the access log goes; nil: Logger
	MetricsPublic           bool              // serve /metrics without credentials
	ExecutionRetention      time.Duration     // how long a finished execution is kept; 10 min
	ExecutionRetentionBytes int               // bytes all finished executions may hold; 256 MiB
	SnapshotMaxBytes        int64             // one session snapshot's bytes; 256 MiB (needs a state directory: Isolation.StateDir)
	SnapshotTotalBytes      int64             // all snapshots' bytes; the oldest of the tenant holding the most go first; 4 GiB
	SnapshotTenantBytes     int64             // one tenant's snapshots' bytes; its own oldest go first; 1 GiB
	SnapshotRetention       time.Duration     // a snapshot is deleted this long after it was taken; 7 days
	Admission               stream.Admission  // session caps and the start queue; zero values turn them off
	Token                   string            // when set, every route but /healthz requires it (or a JWT, or a ticket)
	AllowedOrigins          []string          // origins allowed on state-changing requests and WebSockets besides the request's own; "*" allows any
	AllowedHosts            []string          // Host names allowed besides loopback and the daemon's own addresses; "*" turns the check off
	JWTPublicKey            string            // PEM public key (or its base64) verifying bearer JWTs; "" for none
	TicketTTL               time.Duration     // lifetime of a ticket from POST /tickets; 30 s
	MaxTicketsPerCaller     int               // unused tickets one caller may hold; 1000
	MaxConnsPerIP           int               // connections at once from one client address; 0 for no limit (the daemon's default is 256)
	Clock                   func() time.Time  // the credentials' clock (JWT times, ticket lifetimes), for tests; nil is time.Now
	Isolation               backend.Isolation // per-runtime limits, runtime user and environment allow list of local runtimes
	Cluster                 ClusterConfig     // replicas over NATS JetStream (clusterroute.go); zero: a single daemon
	Logger                  *slog.Logger
}

func (c *Config) defaults() {
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = 30 * time.Second
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = 900 * time.Second
	}
	if c.KernelIdle <= 0 {
		c.KernelIdle = 300 * time.Second
	}
	if c.NativeIdle <= 0 {
		c.NativeIdle = 1800 * time.Second
	}
	if c.TenantIdle == 0 {
		c.TenantIdle = 600 * time.Second
	}
	if c.OutputBudget <= 0 {
		c.OutputBudget = execution.DefaultBudget
	}
	if c.MaxBody <= 0 {
		c.MaxBody = 64 << 20
	}
	if c.CodeBackend == "" {
		c.CodeBackend = "auto"
	}
	if c.KernelStartTimeout <= 0 {
		c.KernelStartTimeout = 60 * time.Second
	}
	if c.NativeStartTimeout <= 0 {
		c.NativeStartTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Server is the gateway. Create it with New, run it with Serve, stop it
// with Shutdown.
type Server struct {
	core  *call.Core // runs every surface's calls; owns the root context of their work
	hub   *wsock.Hub // the WebSockets of the live surfaces
	rt    *backend.Runtimes
	guard *guard.Guard // Host, Origin, CORS and credentials, before any route
	cfg   Config
	log   *slog.Logger
	reg   *stream.Registry
	execs *execution.Store  // the registry's store of executions (state.go)
	snaps *snapshot.Manager // sessions' snapshots (state.go); nil without a state directory
	// checkpoints writes sessions to the cluster's object store after
	// they ran code (checkpoints.go); nil outside a cluster.
	checkpoints *checkpoints
	// sharedExecs is the cluster's store of finished executions; nil
	// outside a cluster.
	sharedExecs *cluster.SharedExecutions
	env         *backend.Environment // rt.Env()
	started     time.Time
	http        *fasthttp.Server
	metrics     *metrics // metrics.go: the Prometheus registry behind /metrics
	mcp         *mcp.Server
	v1          *v1.Surface // its shutdown hooks run as Shutdown begins
	observe     *observe.Surface
	watches     *watch.Watchers  // the file watchers of /v1/file/watch, /v2/fs/watch and the WebSocket
	access      *accessWriter    // the access log's writer (accesslog.go); nil with NoAccessLog
	peers       sync.Map         // runtimes' open connections: remote address -> uid (peers.go)
	cluster     *cluster.Cluster // this replica's part of a cluster (clusterroute.go); nil for a single daemon

	lnMu      sync.Mutex // guards below
	listeners []net.Listener
	shut      bool // Shutdown began: Serve refuses new listeners

	// unauthBody holds the *fasthttp.RequestHeader of each request that was
	// given the small body limit (headerReceived), until it is answered:
	// fasthttp resets a request whose chunked body broke the limit before
	// the ErrorHandler sees it, so the header cannot be checked again then.
	unauthBody sync.Map
}

// New discovers the interpreters and builds the routes.
func New(cfg Config) (*Server, error) {
	cfg.defaults()
	g, err := guard.New(guard.Config{
		AllowedHosts: cfg.AllowedHosts, AllowedOrigins: cfg.AllowedOrigins,
		Token: cfg.Token, JWTPublicKey: cfg.JWTPublicKey, TicketTTL: cfg.TicketTTL,
		MaxTicketsPerCaller: cfg.MaxTicketsPerCaller, OpenPaths: openPaths(cfg), Logger: cfg.Logger, Now: cfg.Clock,
	})
	if err != nil {
		return nil, err
	}
	counters := stream.NewCounters()
	gate := stream.NewStartGate(cfg.Admission) // sessions and pool refills start under one gate
	rt, err := backend.New(context.Background(), backend.Config{
		CodeBackend: cfg.CodeBackend, KernelName: cfg.KernelName,
		KernelIdle: cfg.KernelIdle, NativeIdle: cfg.NativeIdle, KernelStartTimeout: cfg.KernelStartTimeout,
		NativeStartTimeout: cfg.NativeStartTimeout, Workdir: cfg.Workdir, JupyterEndpoint: cfg.JupyterEndpoint, JupyterToken: cfg.JupyterToken,
		JupyterKernel: cfg.JupyterKernel, JupyterStartTimeout: cfg.JupyterStartTimeout,
		JupyterProbeInterval: cfg.JupyterProbeInterval, KernelPrewarm: cfg.KernelPrewarm,
		CodePrewarm: cfg.CodePrewarm, NoKernelWarmup: cfg.NoKernelWarmup, KernelStart: cfg.KernelStart,
		KernelTransport: cfg.KernelTransport, Counter: counters, Logger: cfg.Logger,
		Isolation: cfg.Isolation, StartGate: gate, TenantIdle: max(cfg.TenantIdle, 0),
	})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, started: time.Now(), rt: rt, env: rt.Env(), guard: g}
	if !g.AuthRequired() {
		// Every caller is the one default tenant: its pools fill now, as
		// they would without tenant isolation.
		if err := rt.PrewarmTenant("default"); err != nil {
			s.log.Warn("prewarm the default tenant", "err", err)
		}
	}
	if cfg.Token != "" {
		// Every caller with the API token is one tenant: its pools fill
		// now too, so its first session takes a ready kernel.
		if err := rt.PrewarmTenant(guard.Caller{Method: "token"}.Tenant()); err != nil {
			s.log.Warn("prewarm the token's tenant", "err", err)
		}
	}
	if cfg.JWTPublicKey != "" {
		// Any JWT subject may be a tenant aiod has never seen: keep a
		// sandbox and its pools ready for the next one.
		rt.KeepSpare()
	}
	wl := cfg.LiveLimits
	if cfg.WSQueueBytes > 0 {
		wl.QueueBytes = cfg.WSQueueBytes
	}
	if cfg.WriteTimeout > 0 {
		wl.WriteTimeout = cfg.WriteTimeout
	}
	s.hub = wsock.NewHub(wsock.Config{Limits: wl, MaxRead: int64(cfg.MaxBody), Counters: counters, Logger: cfg.Logger, CheckOrigin: g.CheckOrigin})
	var shared execution.Shared
	if cfg.Cluster.NATS != "" {
		shared = sharedExecutions{s}
	}
	execs, err := openExecutions(cfg, storeErrors(cfg.Logger, counters), shared)
	if err != nil {
		_ = rt.Close(context.Background())
		return nil, err
	}
	s.execs = execs
	snaps, err := openSnapshots(cfg, rt)
	if err != nil {
		_ = execs.Close()
		_ = rt.Close(context.Background())
		return nil, err
	}
	s.snaps = snaps
	rc := stream.Config{Budget: cfg.OutputBudget, ReapInterval: cfg.ReapInterval, Logger: cfg.Logger, Counters: counters,
		Executions: execs.Config(), Store: execs, Admission: cfg.Admission, Gate: gate}
	if snaps != nil {
		rc.Snapshots = snaps
		if cfg.Cluster.NATS != "" {
			rc.Snapshots = clusterSnapshots{snaps, s}
		}
	}
	rc.Ran = s.sessionRan
	rc.NetworkNote = rt.NetworkNote()
	s.reg = stream.NewRegistry(rc)
	s.core = call.New(s.reg, rt, call.Config{DefaultTimeout: cfg.DefaultTimeout, MaxTimeout: cfg.MaxTimeout,
		KernelIdle: cfg.KernelIdle, NativeIdle: cfg.NativeIdle, KernelStartTimeout: cfg.KernelStartTimeout,
		OutputBudget: cfg.OutputBudget, StreamWrite: wl.WithDefaults().WriteTimeout, Logger: cfg.Logger,
		HeldTenant: cfg.HeldCodeTenant, HeldTotal: cfg.HeldCodeTotal})
	s.metrics = newMetrics(s, counters)
	s.mcp = mcp.New(s.core, mcp.Config{MaxBody: cfg.MaxBody, Version: Version})
	s.watches = watch.NewWatchers()
	s.v1 = v1.New(s.core, v1.Config{Version: Version, StateDir: cfg.Isolation.StateDir, Logger: cfg.Logger})
	rt.BeforeTenantRelease(func(tenant string) { s.v1.RunTenantHooks(s.core.Ctx(), tenant) })
	if s.observe, err = observe.New(s.core, observe.Config{StateDir: cfg.Isolation.StateDir, Logger: cfg.Logger}); err != nil {
		if snaps != nil {
			snaps.Close()
		}
		_ = execs.Close()
		_ = rt.Close(context.Background())
		return nil, err
	}
	if err := s.joinCluster(cfg.Cluster, counters); err != nil {
		s.observe.Close(context.Background())
		if snaps != nil {
			snaps.Close()
		}
		_ = execs.Close()
		_ = rt.Close(context.Background())
		return nil, err
	}
	handler := s.nameReplica(s.countRequests(g.Wrap(s.toHome(s.noteFileWrites(s.refuseRuntimePeers(s.routes().Handler))))))
	if !cfg.NoAccessLog {
		acc := cfg.AccessLogger
		if acc == nil {
			acc = cfg.Logger
		}
		s.access = newAccessWriter(acc)
		handler = accessLog(s.access, handler)
	}
	served := handler
	handler = func(ctx *fasthttp.RequestCtx) {
		s.unauthBody.Delete(&ctx.Request.Header) // the guard answers it, body read or not
		served(ctx)
	}
	s.http = &fasthttp.Server{
		Handler:               handler,
		Name:                  "aiod",
		MaxRequestBodySize:    cfg.MaxBody,
		ReadBufferSize:        headerLimit,
		ReadTimeout:           60 * time.Second,
		IdleTimeout:           120 * time.Second,
		HeaderReceived:        s.headerReceived,
		ErrorHandler:          s.transportError,
		MaxConnsPerIP:         cfg.MaxConnsPerIP,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		TCPKeepalive:          true,
		SecureErrorLogMessage: true, // fasthttp's messages never quote the request (credentials travel in it)
		Logger:                fasthttpLogger{cfg.Logger},
		ExpectHandler:         s.expect,
	}
	return s, nil
}

// headerLimit is the largest request header aiod reads (fasthttp's read
// buffer); a larger one is answered 431.
const headerLimit = 4096

// UnauthBodyLimit is the body a request may send when credentials are
// required and its header carries none that pass (a chunked body is
// counted the same): nothing large is read before authentication.
const UnauthBodyLimit = 8 << 10

// headerReceived runs once a request's header is read, before its body:
// when credentials are required and the header carries none that pass
// (the guard's check, a ticket looked at but not used up), the body limit
// is UnauthBodyLimit instead of --max-body.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if n := h.ContentLength(); n == -2 || (n >= 0 && n <= UnauthBodyLimit) {
		return fasthttp.RequestConfig{} // no body (-2), or one below the limit
	}
	if s.guard.HeaderAuthorized(h) {
		s.unauthBody.Delete(h)
		return fasthttp.RequestConfig{}
	}
	s.unauthBody.Store(h, true)
	return fasthttp.RequestConfig{MaxRequestBodySize: UnauthBodyLimit}
}

// tookUnauthBody reports, once, whether ctx's request was given the small
// body limit.
func (s *Server) tookUnauthBody(ctx *fasthttp.RequestCtx) bool {
	_, ok := s.unauthBody.LoadAndDelete(&ctx.Request.Header)
	return ok
}

// refuseUnauthBody answers a request without valid credentials whose body
// is larger than UnauthBodyLimit: 401, as the guard would have.
func (s *Server) refuseUnauthBody(ctx *fasthttp.RequestCtx) {
	s.guard.Unauthorized(ctx, fmt.Sprintf(
		"no valid credentials, and a request without them may send at most %d bytes of body", UnauthBodyLimit))
}

// HeldBytes is the memory the daemon deliberately holds (retained
// executions, running ones' outputs, a cost per live runtime) and the
// buffers among it (see stream.Registry.HeldBytes).
func (s *Server) HeldBytes() (held, buffers int64) { return s.reg.HeldBytes() }

// Environment is what discovery found.
func (s *Server) Environment() *backend.Environment { return s.env }

func (s *Server) routes() *router.Router {
	r := router.New()
	r.SaveMatchedRoutePath = true // the request metrics label by pattern
	r.RedirectTrailingSlash = false
	r.HandleMethodNotAllowed = true
	r.SaveMatchedRoutePath = true // for the access log
	r.NotFound = func(ctx *fasthttp.RequestCtx) {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("no route %s %s", ctx.Method(), ctx.Path()))
	}
	r.MethodNotAllowed = func(ctx *fasthttp.RequestCtx) {
		api.Fail(ctx, fasthttp.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", ctx.Method(), ctx.Path()))
	}
	r.PanicHandler = func(ctx *fasthttp.RequestCtx, v any) {
		s.log.Error("handler panic", "path", string(ctx.Path()), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		api.Fail(ctx, fasthttp.StatusInternalServerError, fmt.Sprintf("internal error: %v", v))
	}

	// execute, sessions, executions, snapshots, completion: aiod's own code routes
	v2.New(s.core, v2.Config{Registry: s.reg, Snapshots: s.snaps, MaxTimeout: s.cfg.MaxTimeout,
		KernelStartTimeout: s.cfg.KernelStartTimeout}).Register(r)
	r.GET("/v2/code/info", s.v2CodeInfo)
	r.GET("/v2/sandbox", s.v2Sandbox)
	r.GET(ClusterPath, s.v2Cluster)
	r.GET("/v1/capabilities", s.v1Capabilities)
	r.GET("/healthz", func(ctx *fasthttp.RequestCtx) { api.OK(ctx, map[string]any{"status": "ok"}) })
	r.POST(guard.TicketsPath, s.guard.ServeTickets)
	fsplane.Register(r, fsplane.Config{MaxBody: int64(s.cfg.MaxBody), Logger: s.log, Workspace: s.core.Workspace(), View: s.core.ViewOf})
	s.v1.Register(r)                                   // the agent_sandbox SDK's code, jupyter, nodejs and sandbox routes
	fswatch.New(s.core, s.watches).Register(r)         // /v1/file/watch: file watches in the caller's view
	s.observe.Register(r)                              // /v1/sandbox/observe: readings of the caller's sandbox
	live.New(s.core, s.hub, s.watches).Register(r)     // /v2/code/ws: aiod's streaming protocol
	jupyterapi.New(s.core, s.hub, Version).Register(r) // the Jupyter kernels API and its channels
	s.mcp.Register(r)                                  // the MCP endpoint at /mcp
	s.registerWeb(r)                                   // web.go: the browser notebook page at /
	// /v1/shell and /v1/bash; the Jupyter terminals API and its terminado sockets
	shell.New(s.core, shell.Config{TerminalPath: TerminalPath, MaxSessions: s.cfg.Admission.MaxSessions}).Register(r)
	terminals.New(s.core, s.hub, terminals.Config{}).Register(r)
	r.GET(MetricsPath, s.serveMetrics)
	registerOpenAPI(r) // openapi.go: /openapi.json and /docs
	return r
}

// openPaths are the routes that need no credentials.
func openPaths(cfg Config) []string {
	p := append([]string{"/healthz"}, openAPIPaths...)
	if cfg.MetricsPublic {
		p = append(p, MetricsPath)
	}
	return p
}

// transportError answers requests fasthttp could not read. Its answers are
// fixed texts: fasthttp's errors can quote the request, and credentials
// (Authorization, ?token=) travel in it.
func (s *Server) transportError(ctx *fasthttp.RequestCtx, err error) {
	guard.SecureHeaders(ctx)
	var (
		small  *fasthttp.ErrSmallBuffer
		broken fasthttp.ErrBrokenChunk
		te     interface{ Timeout() bool }
	)
	unauth := s.tookUnauthBody(ctx)
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge) && unauth:
		s.refuseUnauthBody(ctx)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		api.Fail(ctx, fasthttp.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body is larger than the %d-byte limit (--max-body)", s.cfg.MaxBody))
	case errors.As(err, &small):
		api.Fail(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge,
			fmt.Sprintf("request headers are larger than %d bytes: send fewer or shorter headers (a long URL counts too)", headerLimit))
	case errors.As(err, &te) && te.Timeout():
		api.Fail(ctx, fasthttp.StatusRequestTimeout, "request was not read in time")
	case errors.As(err, &broken):
		api.Fail(ctx, fasthttp.StatusBadRequest, "cannot read request: the chunked body is malformed")
	default:
		api.Fail(ctx, fasthttp.StatusBadRequest, "cannot read request: "+transportReason(err))
	}
}

// transportReason says in fixed words what was wrong with a request
// fasthttp could not read.
func transportReason(err error) string {
	for _, r := range []struct {
		err error
		why string
	}{
		{fasthttp.ErrDuplicateContentLength, "Content-Length is given twice"},
		{fasthttp.ErrNonNumericChars, "Content-Length is not a number"},
		{fasthttp.ErrUnsupportedTransferEncoding, "the Transfer-Encoding is not supported (only chunked is)"},
		{fasthttp.ErrMissingRequestMethod, "the request line has no method"},
		{fasthttp.ErrUnsupportedRequestMethod, "the request method is not supported"},
		{fasthttp.ErrEmptyRequestURI, "the request line has no URI"},
		{fasthttp.ErrorInvalidURI, "the request URI is not valid"},
		{fasthttp.ErrBadTrailer, "the chunked body's trailer is not allowed"},
	} {
		if errors.Is(err, r.err) {
			return r.why
		}
	}
	return "it is not a valid HTTP/1.1 request"
}

// expect refuses an "Expect: 100-continue" upload larger than the body
// limit before the client sends it (curl asks for bodies over 1 MiB): 401
// when it has no valid credentials (and was given the small limit), 413
// when it is larger than --max-body.
func (s *Server) expect(ctx *fasthttp.RequestCtx) int {
	if s.tookUnauthBody(ctx) {
		guard.SecureHeaders(ctx)
		s.refuseUnauthBody(ctx)
		return fasthttp.StatusUnauthorized
	}
	if n := ctx.Request.Header.ContentLength(); n > s.cfg.MaxBody {
		guard.SecureHeaders(ctx)
		api.Fail(ctx, fasthttp.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body is larger than the %d-byte limit (--max-body)", s.cfg.MaxBody))
		return fasthttp.StatusRequestEntityTooLarge
	}
	return fasthttp.StatusContinue
}

// Serve answers requests from ln until Shutdown (which closes ln). After
// Shutdown began it closes ln and returns at once.
func (s *Server) Serve(ln net.Listener) error {
	s.lnMu.Lock()
	if s.shut {
		s.lnMu.Unlock()
		_ = ln.Close()
		return errors.New("the server was shut down")
	}
	ln = &onceCloser{Listener: quickAckListener{Listener: ln}}
	s.listeners = append(s.listeners, ln)
	s.lnMu.Unlock()
	if s.access != nil {
		s.access.start()
	}
	s.log.Info("serving", "addr", ln.Addr().String(), "python_backend", s.env.PythonBackend)
	if w := s.guard.Listening(ln.Addr()); w != "" {
		s.log.Warn(w)
	}
	if s.rt.RuntimesReachAPI() {
		ln = &peerListener{Listener: ln, isRuntime: s.rt.IsRuntimeUID, peers: &s.peers, log: s.log.Warn}
	}
	return s.http.Serve(ln)
}

// Shutdown stops accepting requests, waits for those in flight (bounded by
// ctx), then ends every session and waits for every runtime to exit.
//
// Requests still running after a short drain (5 s) end when their sessions
// close: they answer with an error result that says the session was deleted.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mcp.BeginShutdown() // MCP's long-lived GET streams must not hold up the drain
	s.lnMu.Lock()
	s.shut = true
	lns := s.listeners
	s.lnMu.Unlock()
	hdone := make(chan error, 1)
	go func() { hdone <- s.http.ShutdownWithContext(ctx) }()
	// fasthttp closes the listeners it registered; one that a Serve call
	// has not registered yet would keep that Serve waiting forever.
	for _, ln := range lns {
		_ = ln.Close()
	}
	drain := time.NewTimer(5 * time.Second)
	defer drain.Stop()
	var herr error
	select {
	case herr = <-hdone:
		hdone = nil
	case <-drain.C:
	case <-ctx.Done():
	}
	// The tenants' shutdown hooks, while their runtimes still run and
	// before their sessions are saved (v1/hooks.go).
	s.v1.RunShutdownHooks(ctx)
	s.observe.Close(ctx) // each running observation writes its report
	s.core.Cancel()
	if s.checkpoints != nil {
		s.checkpoints.close() // the stop's own saves are handed over below
	}
	rerr := s.reg.Close(ctx) // saves the named sessions
	var cerr error
	if s.cluster != nil {
		s.handOver(ctx)
		cerr = s.cluster.Close(ctx) // its tenants are placed again at their next call
	}
	s.mcp.Close()
	lerr := errors.Join(s.hub.Close(ctx), s.core.Close(ctx))
	perr := s.rt.Close(ctx)
	xerr := s.execs.Close()
	if s.snaps != nil {
		s.snaps.Close()
	}
	if hdone != nil {
		select {
		case herr = <-hdone:
		case <-ctx.Done():
			herr = ctx.Err()
		}
	}
	var aerr error
	if s.access != nil {
		aerr = s.access.stop(ctx)
	}
	return errors.Join(herr, cerr, rerr, lerr, perr, xerr, aerr)
}

// onceCloser is a listener that closes once: Shutdown and fasthttp may
// both close it, and fasthttp stops its drain at a Close that fails.
type onceCloser struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceCloser) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// fasthttpLogger sends fasthttp's own messages (connections it could not
// serve) to the daemon's log at debug level.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug("http", "detail", fmt.Sprintf(format, args...))
}
