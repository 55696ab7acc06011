// Package guard decides, before any route runs, whether a request may reach
// aiod at all. aiod runs whatever code it is sent, so a web page the user
// visits must not be able to drive it; the guard's rules, in order:
//
//  1. Host: the Host header names a loopback host (localhost, 127.0.0.0/8,
//     [::1]), an address aiod listens on (and, when that is not loopback,
//     the machine's own names and addresses), or an --allowed-hosts entry.
//     This defeats DNS rebinding, where an attacker's name resolves to
//     127.0.0.1 and the browser then sends that name as Host.
//  2. CORS preflights (OPTIONS with Access-Control-Request-Method) are
//     answered here: allowed origins get the Access-Control-Allow-* headers,
//     others a 403 without them.
//  3. Fetch Metadata: a request a browser sends for a page of another site
//     (Sec-Fetch-Site cross-site, or same-site: another port on the same
//     host) that is not a navigation is refused, unless its Origin is
//     allowed. This keeps <script>, <img> and similar tags on other pages
//     from loading aiod's answers (and from probing what exists).
//  4. Origin: a state-changing request (any method but GET, HEAD and
//     OPTIONS, and every request with an Upgrade header, such as a WebSocket
//     handshake) that carries an Origin must be same-origin with the request
//     (scheme, host, port) or match --allowed-origins. This defeats the
//     "simple" cross-origin POSTs (text/plain, forms) that browsers send
//     without a preflight. Requests without Origin (SDKs, curl) pass.
//  5. Credentials, when a token (AIO_TOKEN) or --jwt-public-key is set: the API token or
//     a JWT as "Authorization: Bearer", the token as ?token=, or a
//     single-use ticket from POST /tickets as ?ticket=. Open paths are
//     judged on the raw path, the one fasthttp/router dispatches on, so an
//     encoded "%2F.." cannot make a route look like /healthz.
//  6. A request one replica of a cluster forwards to another carries the
//     caller the first verified, signed with the cluster's secret
//     (ForwardedHeader, forward.go); it takes the place of 5, and one
//     without a valid signature is refused whatever else it carries.
//
// Every answer that passes through the guard carries
// "X-Content-Type-Options: nosniff" and "Cross-Origin-Resource-Policy:
// same-origin" (SecureHeaders), refusals included.
//
// Every refusal is logged at info with the route, the reason and the remote
// address, never the credential, and its answer names the flag to change.
package guard

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aiod/aiod/gateway/api"
	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"
)

// Config is the guard's settings; zero values take the documented defaults.
type Config struct {
	AllowedHosts        []string      // --allowed-hosts entries; "*" turns the Host check off
	AllowedOrigins      []string      // --allowed-origins entries; "*" allows every origin
	Token               string        // the API token (AIO_TOKEN, --token-file); "" for none
	JWTPublicKey        string        // --jwt-public-key: PEM or its base64; "" for none
	TicketTTL           time.Duration // lifetime of a ticket; DefaultTicketTTL
	MaxTickets          int           // unused tickets kept at once; DefaultMaxTickets
	MaxTicketsPerCaller int           // unused tickets one caller holds at once; DefaultMaxTicketsPerCaller
	OpenPaths           []string      // paths that need no credentials (the Host check still applies)
	Logger              *slog.Logger
	Now                 func() time.Time // the clock, for tests; time.Now
}

// Guard applies the rules. Build it with New; it is safe for concurrent use.
type Guard struct {
	hostAny     bool
	hostRules   []hostRule
	originAny   bool
	originRules []originRule
	token       []byte
	jwt         *jwtVerifier
	tickets     *ticketStore
	open        map[string]bool
	log         *slog.Logger

	own atomic.Pointer[[]Host] // addresses and names added by Listening

	clusterSecret []byte           // signs forwarded callers (forward.go); nil outside a cluster
	clock         func() time.Time // Config.Now, or time.Now
}

func (g *Guard) now() time.Time { return g.clock() }

// New checks the configuration: a bad --allowed-hosts or --allowed-origins
// entry, or a public key that cannot be read, is an error naming the flag.
func New(cfg Config) (*Guard, error) {
	g := &Guard{token: []byte(cfg.Token), log: cfg.Logger, open: map[string]bool{}, clock: cfg.Now}
	if g.clock == nil {
		g.clock = time.Now
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	for _, e := range cfg.AllowedHosts {
		r, err := parseHostRule(e)
		if err != nil {
			return nil, fmt.Errorf("--allowed-hosts: %v", err)
		}
		g.hostAny = g.hostAny || r.any
		g.hostRules = append(g.hostRules, r)
	}
	for _, e := range cfg.AllowedOrigins {
		r, err := parseOriginRule(e)
		if err != nil {
			return nil, fmt.Errorf("--allowed-origins: %v", err)
		}
		g.originAny = g.originAny || r.any
		g.originRules = append(g.originRules, r)
	}
	if strings.TrimSpace(cfg.JWTPublicKey) != "" {
		v, err := newJWTVerifier(cfg.JWTPublicKey, cfg.Now)
		if err != nil {
			return nil, fmt.Errorf("--jwt-public-key: %v", err)
		}
		g.jwt = v
	}
	for _, p := range cfg.OpenPaths {
		g.open[p] = true
	}
	g.tickets = newTicketStore(cfg.TicketTTL, cfg.MaxTickets, cfg.MaxTicketsPerCaller, cfg.Now)
	g.own.Store(&[]Host{})
	return g, nil
}

// AuthRequired reports whether a token or a JWT key is configured.
func (g *Guard) AuthRequired() bool { return len(g.token) > 0 || g.jwt != nil }

// TicketTTL is how long a ticket lives.
func (g *Guard) TicketTTL() time.Duration { return g.tickets.ttl }

// TicketLimits are the unused tickets one caller, and all callers, may hold.
func (g *Guard) TicketLimits() (perCaller, all int) { return g.tickets.perCaller, g.tickets.max }

// Listening tells the guard an address aiod serves on, so that Host may
// name it. On a non-loopback address the machine's host name and the
// addresses of its interfaces are allowed too. It returns a warning to
// print when that address is reachable from elsewhere and no credentials
// are required, else "".
func (g *Guard) Listening(addr net.Addr) string {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return ""
	}
	ip := ap.Addr().Unmap().WithZone("")
	add := []Host{}
	if !ip.IsUnspecified() {
		add = append(add, hostFromIP(ip))
	}
	if ip.IsLoopback() {
		g.addOwn(add)
		return ""
	}
	if name, err := os.Hostname(); err == nil {
		if h, err := parseHostName(name); err == nil {
			add = append(add, h)
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				add = append(add, hostFromIP(p.Addr()))
			}
		}
	}
	g.addOwn(add)
	if g.AuthRequired() {
		return ""
	}
	return fmt.Sprintf("aiod listens on %s, which other machines may reach, and requires no credentials: "+
		"anyone who can connect can run code as this user. Set a token (AIO_TOKEN, or --token-file) or --jwt-public-key (AIO_JWT_PUBLIC_KEY), "+
		"or listen on 127.0.0.1 with --addr", addr)
}

func (g *Guard) addOwn(add []Host) {
	for {
		old := g.own.Load()
		next := append(append([]Host{}, *old...), add...)
		if g.own.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Wrap puts the guard in front of next.
func (g *Guard) Wrap(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		SecureHeaders(ctx)
		host, ok := g.checkHost(ctx)
		if !ok {
			return
		}
		origin := ctx.Request.Header.Peek("Origin")
		if ctx.IsOptions() && len(origin) > 0 && len(ctx.Request.Header.Peek("Access-Control-Request-Method")) > 0 {
			g.preflight(ctx, host, string(origin))
			return
		}
		same, allowed, why := false, false, ""
		if len(origin) > 0 {
			same, allowed, why = g.judgeOrigin(ctx, host, string(origin))
		}
		if site := otherSite(ctx); site != "" && !allowed {
			g.refuse(ctx, fasthttp.StatusForbidden, fmt.Sprintf("a %s request (Sec-Fetch-Site: %s, Sec-Fetch-Mode: %s) is refused: a page on another site may not load aiod's answers",
				site, site, ctx.Request.Header.Peek("Sec-Fetch-Mode")),
				"open aiod's URL directly, or fetch it with CORS from an origin listed in --allowed-origins (AIO_ALLOWED_ORIGINS)")
			return
		}
		if len(origin) > 0 {
			switch {
			case !allowed && stateChanging(ctx):
				g.refuse(ctx, fasthttp.StatusForbidden, why,
					"a web page on another origin may not send this request; allow that origin with --allowed-origins (AIO_ALLOWED_ORIGINS)")
				return
			case allowed && !same:
				h := &ctx.Response.Header
				h.SetBytesV("Access-Control-Allow-Origin", origin)
				h.Add("Vary", "Origin")
				h.Set("Access-Control-Expose-Headers", "WWW-Authenticate, Content-Disposition")
			}
		}
		if !g.authorize(ctx) {
			return
		}
		next(ctx)
	}
}

// SecureHeaders sets the headers every answer carries: nosniff, so a
// browser never runs or renders an answer as something its Content-Type
// does not say, and a same-origin resource policy, so a page on another
// origin cannot embed one (<script>, <img>, ...).
func SecureHeaders(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// otherSite returns "cross-site" or "same-site" when a browser sends the
// request for a page of another site, or of the same site on another
// origin (another port on localhost is same-site), and the request is not
// a navigation (following a link, submitting a form: the Origin rule
// judges those that change state). It returns "" for same-origin
// requests, navigations, and requests without Fetch Metadata (SDKs, curl).
func otherSite(ctx *fasthttp.RequestCtx) string {
	site := string(ctx.Request.Header.Peek("Sec-Fetch-Site"))
	if site != "cross-site" && site != "same-site" {
		return ""
	}
	if string(ctx.Request.Header.Peek("Sec-Fetch-Mode")) == "navigate" {
		return ""
	}
	return site
}

// stateChanging reports whether a request may change state: any method
// but GET, HEAD and OPTIONS, and any request asking for a protocol upgrade
// (a WebSocket handshake is a GET).
func stateChanging(ctx *fasthttp.RequestCtx) bool {
	if len(ctx.Request.Header.Peek("Upgrade")) > 0 {
		return true
	}
	return !(ctx.IsGet() || ctx.IsHead() || ctx.IsOptions())
}

// checkHost applies the Host rule. A request without a Host header (an
// HTTP/1.0 program; browsers always send one) passes. The host a request
// line in absolute form names is checked as well.
func (g *Guard) checkHost(ctx *fasthttp.RequestCtx) (Host, bool) {
	raw := ctx.Request.Header.Host()
	if len(raw) == 0 {
		return Host{}, true
	}
	h, ok := g.hostOK(ctx, raw)
	if !ok {
		return Host{}, false
	}
	if u := ctx.URI().Host(); len(u) > 0 && !bytes.EqualFold(u, raw) {
		if _, ok := g.hostOK(ctx, u); !ok {
			return Host{}, false
		}
	}
	return h, true
}

func (g *Guard) hostOK(ctx *fasthttp.RequestCtx, raw []byte) (Host, bool) {
	h, err := ParseHost(string(raw))
	if err != nil {
		g.refuse(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("Host %q cannot be read: %v", raw, err), "send Host as name[:port], IPv4[:port] or [IPv6][:port]")
		return Host{}, false
	}
	if g.HostAllowed(h) {
		return h, true
	}
	g.refuse(ctx, fasthttp.StatusForbidden, fmt.Sprintf("Host %q is not allowed", raw),
		"aiod answers loopback names and addresses and the addresses it listens on; "+
			`add this name to --allowed-hosts (AIO_ALLOWED_HOSTS), or "*" behind a proxy that checks Host`)
	return Host{}, false
}

// HostAllowed applies the Host rule to a parsed host.
func (g *Guard) HostAllowed(h Host) bool {
	if g.hostAny || h.IsLoopback() {
		return true
	}
	for _, o := range *g.own.Load() {
		if o.SameHost(h) {
			return true
		}
	}
	for _, r := range g.hostRules {
		if r.match(h) {
			return true
		}
	}
	return false
}

// judgeOrigin compares a request's Origin with the request and the rules.
// same is true when it is the request's own origin; allowed when it is that
// or an allowed one; why says why not.
func (g *Guard) judgeOrigin(ctx *fasthttp.RequestCtx, host Host, origin string) (same, allowed bool, why string) {
	o, err := ParseOrigin(origin)
	if err != nil {
		return false, g.originAny, fmt.Sprintf("Origin %q cannot be read (%v), so it counts as another origin", origin, err)
	}
	scheme := "http"
	if ctx.IsTLS() {
		scheme = "https"
	}
	if host.Name != "" && o.SameOrigin(scheme, host) {
		return true, true, ""
	}
	if g.OriginAllowed(o) {
		return false, true, ""
	}
	return false, false, fmt.Sprintf("cross-origin request from %q refused", origin)
}

// OriginAllowed reports whether --allowed-origins allows o (same-origin
// requests are allowed without it).
func (g *Guard) OriginAllowed(o Origin) bool {
	if g.originAny {
		return true
	}
	for _, r := range g.originRules {
		if r.match(o) {
			return true
		}
	}
	return false
}

// CheckOrigin is the origin rule for a handler that checks again on its
// own (the WebSocket upgrade): no Origin, the request's own origin, or an
// allowed one. It returns the Origin header as sent.
func (g *Guard) CheckOrigin(ctx *fasthttp.RequestCtx) (bool, string) {
	origin := string(ctx.Request.Header.Peek("Origin"))
	if origin == "" {
		return true, ""
	}
	var host Host
	if raw := ctx.Request.Header.Host(); len(raw) > 0 {
		h, err := ParseHost(string(raw))
		if err != nil {
			return false, origin
		}
		host = h
	}
	_, ok, _ := g.judgeOrigin(ctx, host, origin)
	return ok, origin
}

// preflight answers a CORS preflight. The methods are every method aiod
// routes use; the headers are those asked for (the origin is trusted).
// Chromium's Private Network Access asks for a private-network grant when
// a public page calls a loopback address; an allowed origin gets it.
func (g *Guard) preflight(ctx *fasthttp.RequestCtx, host Host, origin string) {
	_, allowed, why := g.judgeOrigin(ctx, host, origin)
	if !allowed {
		g.refuse(ctx, fasthttp.StatusForbidden, "CORS preflight: "+why,
			"allow that origin with --allowed-origins (AIO_ALLOWED_ORIGINS)")
		return
	}
	h := &ctx.Response.Header
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, PATCH, DELETE")
	if rh := ctx.Request.Header.Peek("Access-Control-Request-Headers"); len(rh) > 0 {
		h.SetBytesV("Access-Control-Allow-Headers", rh)
	}
	if string(ctx.Request.Header.Peek("Access-Control-Request-Private-Network")) == "true" {
		h.Set("Access-Control-Allow-Private-Network", "true")
	}
	h.Set("Access-Control-Max-Age", "600")
	h.Add("Vary", "Origin")
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

// authorize applies the credentials rule and records the caller on ctx.
// Open paths are looked up by the raw path (RoutePath), the one the router
// dispatches on.
func (g *Guard) authorize(ctx *fasthttp.RequestCtx) bool {
	if present, ok := g.authorizeForwarded(ctx); present {
		return ok
	}
	path := RoutePath(ctx)
	if !g.AuthRequired() || g.open[string(path)] {
		ctx.SetUserValue(callerKey{}, Caller{Method: "none"})
		return true
	}
	c, why := g.credential(presented{
		auth:    ctx.Request.Header.Peek("Authorization"),
		token:   ctx.QueryArgs().Peek("token"),
		ticket:  ctx.QueryArgs().Peek("ticket"),
		minting: ctx.IsPost() && string(path) == TicketsPath,
	}, true)
	if why != "" {
		g.Unauthorized(ctx, why)
		return false
	}
	ctx.SetUserValue(callerKey{}, c)
	return true
}

// Unauthorized answers 401 with WWW-Authenticate, saying why and how to
// send credentials, and logs the refusal. A browser opening the page (GET
// / accepting HTML) gets a small sign-in page instead of the JSON.
func (g *Guard) Unauthorized(ctx *fasthttp.RequestCtx, why string) {
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="aiod"`)
	if wantsSignInPage(ctx) {
		g.log.Info("request refused", "status", fasthttp.StatusUnauthorized, "method", string(ctx.Method()), "path", "/",
			"reason", why, "remote", ctx.RemoteAddr().String())
		signInPage(ctx, why)
		return
	}
	g.refuse(ctx, fasthttp.StatusUnauthorized, why,
		"send Authorization: Bearer <token or JWT> (AIO_TOKEN or --token-file, --jwt-public-key), or ?ticket=<ticket> from POST /tickets")
}

// RoutePath is the path requests are routed by: the raw path of the
// request line, before percent-decoding and dot-segment removal, which is
// what fasthttp/router matches. The guard judges the same bytes, so a
// path that decodes to an open one (/api/kernels/X%2F..%2F..%2Fhealthz)
// is not open.
func RoutePath(ctx *fasthttp.RequestCtx) []byte { return ctx.Request.URI().PathOriginal() }

// HeaderAuthorized reports whether a request's header carries credentials
// that pass (or none are required), before its body is read: the
// Authorization header, ?token=, or a ?ticket= that is valid now (looked
// at, not used up). The server gives a request that fails it a small body
// limit, so that nothing large is read before authentication.
func (g *Guard) HeaderAuthorized(h *fasthttp.RequestHeader) bool {
	if v := h.Peek(ForwardedHeader); len(v) > 0 {
		_, _, why := g.verifyForwarded(v, h.Method(), h.RequestURI())
		return why == ""
	}
	if !g.AuthRequired() {
		return true
	}
	u := fasthttp.AcquireURI()
	defer fasthttp.ReleaseURI(u)
	if err := u.Parse(nil, h.RequestURI()); err != nil {
		return false
	}
	args := u.QueryArgs()
	_, why := g.credential(presented{
		auth:    h.Peek("Authorization"),
		token:   args.Peek("token"),
		ticket:  args.Peek("ticket"),
		minting: h.IsPost() && string(u.PathOriginal()) == TicketsPath,
	}, false)
	return why == ""
}

// presented is the credentials a request carries. minting is true on POST
// /tickets, where a ticket does not count.
type presented struct {
	auth, token, ticket []byte
	minting             bool
}

// credential finds a valid credential: the Authorization header, then
// ?token=, then (unless the request is for a ticket) ?ticket=, which is
// used up when redeem is set and only looked at otherwise. why is the
// first failure, or "" when one was valid.
func (g *Guard) credential(p presented, redeem bool) (c Caller, why string) {
	fail := func(r string) {
		if why == "" {
			why = r
		}
	}
	if a := p.auth; len(a) > 0 {
		scheme, val, _ := bytes.Cut(bytes.TrimSpace(a), []byte(" "))
		if bytes.EqualFold(scheme, []byte("Bearer")) || bytes.EqualFold(scheme, []byte("token")) {
			if c, err := g.check(bytes.TrimSpace(val)); err == "" {
				return c, ""
			} else {
				fail(err)
			}
		} else {
			fail(fmt.Sprintf("the Authorization scheme %q is not accepted: use Bearer", scheme))
		}
	}
	if q := p.token; len(q) > 0 {
		if c, err := g.check(q); err == "" {
			return c, ""
		} else {
			fail("?token=: " + err)
		}
	}
	if t := p.ticket; len(t) > 0 {
		use := g.tickets.peek
		if redeem {
			use = g.tickets.redeem
		}
		if p.minting {
			fail("a ticket cannot be used to ask for a ticket: send the token or a JWT in Authorization")
		} else if c, ok := use(string(t)); ok {
			return c, ""
		} else {
			fail(fmt.Sprintf("the ticket is unknown, already used or expired (a ticket works once, within %s: --ticket-ttl)", g.tickets.ttl))
		}
	}
	fail("no credentials")
	return Caller{}, why
}

// check verifies a bearer value against the token, then as a JWT.
func (g *Guard) check(v []byte) (Caller, string) {
	if len(g.token) > 0 && subtle.ConstantTimeCompare(v, g.token) == 1 {
		return Caller{Method: "token"}, ""
	}
	if g.jwt == nil {
		return Caller{}, "wrong API token"
	}
	sub, err := g.jwt.verify(string(v))
	var cte *claimTypeError
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenMalformed) && !errors.As(err, &cte) && len(g.token) > 0:
		return Caller{}, "wrong API token (and not a well-formed JWT)"
	default:
		return Caller{}, jwtReason(err, g.jwt.methods)
	}
	return Caller{Method: "jwt", Subject: sub}, ""
}

// refuse answers a refusal and logs it: status, the reason, what to do.
func (g *Guard) refuse(ctx *fasthttp.RequestCtx, status int, why, fix string) {
	g.log.Info("request refused", "status", status, "method", string(ctx.Method()), "path", string(ctx.Path()),
		"reason", why, "remote", ctx.RemoteAddr().String())
	api.Fail(ctx, status, why+": "+fix)
}

// TicketsPath is the route that issues tickets.
const TicketsPath = "/tickets"

// ServeTickets answers POST /tickets: {"ticket": T, "expires_in": S}, the
// AIO sandbox's shape. The guard has authorized the caller; the ticket
// carries that caller's identity.
func (g *Guard) ServeTickets(ctx *fasthttp.RequestCtx) {
	t, err := g.tickets.issue(CallerOf(ctx))
	var full *ticketsFull
	if errors.As(err, &full) {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(full.retrySeconds()))
		api.Fail(ctx, fasthttp.StatusTooManyRequests, fmt.Sprintf(
			"%v: use them, or retry after %d s, when the oldest expires (tickets live %s, --ticket-ttl)", full, full.retrySeconds(), g.tickets.ttl))
		return
	}
	if err != nil {
		// No randomness, or the cluster's ticket store did not answer.
		ctx.Response.Header.Set("Retry-After", "1")
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	api.WriteJSON(ctx, fasthttp.StatusOK, map[string]any{
		"ticket":     t,
		"expires_in": int(math.Ceil(g.tickets.ttl.Seconds())),
	})
}

// Caller is who a request comes from, as the credential check found it.
type Caller struct {
	Method  string // "none" (no credentials required), "token" or "jwt"
	Subject string // the JWT's sub claim; "" otherwise
	Ticket  bool   // the request came with a ticket issued to this caller
}

// Key names the caller for per-caller accounting: "jwt:SUB" for a JWT,
// "token" for the API token, "anonymous" when no credentials are required.
// A ticket counts as the caller it was issued to.
func (c Caller) Key() string {
	switch c.Method {
	case "jwt":
		return "jwt:" + c.Subject
	case "token":
		return "token"
	}
	return "anonymous"
}

// Tenant names whom the caller's names belong to: its sessions, execution
// ids, kernel ids and tickets. "jwt:SUB" for a JWT, "token" for the API
// token, "default" when no credentials are required (Method "none", or ""
// for a request that did not go through the guard). A ticket belongs to
// the tenant it was issued to.
func (c Caller) Tenant() string {
	switch c.Method {
	case "jwt":
		return "jwt:" + c.Subject
	case "token":
		return "token"
	}
	return "default"
}

type callerKey struct{}

// CallerOf returns the caller the guard recorded on ctx (Method "" when
// the request did not go through the guard).
func CallerOf(ctx *fasthttp.RequestCtx) Caller {
	c, _ := ctx.UserValue(callerKey{}).(Caller)
	return c
}
