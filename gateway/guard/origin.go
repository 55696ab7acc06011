package guard

import (
	"errors"
	"fmt"
	"strings"
)

// Origin is a parsed Origin header (RFC 6454): a scheme, a host and the
// effective port (the scheme's default when none is written), or the
// opaque "null" origin of sandboxed frames, file: pages and redirects.
type Origin struct {
	Null   bool
	Scheme string // lower case
	Host   Host   // Host.Port is the effective port (0 for schemes without a default)
}

// String gives the origin in its serialized form.
func (o Origin) String() string {
	if o.Null {
		return "null"
	}
	h := o.Host
	if h.Port == defaultPort(o.Scheme) {
		h.Port = 0
	}
	return o.Scheme + "://" + h.String()
}

// defaultPort is the port a scheme implies; 0 when it has none.
func defaultPort(scheme string) int {
	switch scheme {
	case "http", "ws":
		return 80
	case "https", "wss":
		return 443
	}
	return 0
}

// ParseOrigin parses an Origin header value: "null", or
// scheme "://" host [":" port] with nothing after it (a trailing "/" is
// tolerated). Userinfo, paths, queries and fragments are refused: browsers
// never send them, so a value with one is not a browser's origin.
func ParseOrigin(s string) (Origin, error) {
	if s == "null" {
		return Origin{Null: true}, nil
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Origin{}, errors.New(`want scheme://host[:port] or "null"`)
	}
	if !validScheme(scheme) {
		return Origin{}, fmt.Errorf("scheme %q is not valid", scheme)
	}
	scheme = strings.ToLower(scheme)
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" {
		return Origin{}, errors.New("no host")
	}
	h, err := ParseHost(rest)
	if err != nil {
		return Origin{}, err
	}
	if h.Port == 0 {
		h.Port = defaultPort(scheme)
	}
	return Origin{Scheme: scheme, Host: h}, nil
}

func validScheme(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range []byte(s) {
		alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alpha && (i == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// SameOrigin reports whether the origin is the one a request reached: the
// same scheme ("http", or "https" over TLS), host and effective port. A
// null origin is never the same as anything.
func (o Origin) SameOrigin(scheme string, host Host) bool {
	if o.Null {
		return false
	}
	port := host.Port
	if port == 0 {
		port = defaultPort(scheme)
	}
	return o.Scheme == scheme && o.Host.SameHost(host) && o.Host.Port == port
}

// originRule is one --allowed-origins entry.
type originRule struct {
	any    bool   // "*": every origin, null included
	null   bool   // "null"
	scheme string // "" for a host pattern, which matches any scheme
	suffix string // "*.example.com": ".example.com"
	host   Host   // the exact host when suffix is ""
	port   int    // 0: any port (host patterns only)
}

// parseOriginRule reads an --allowed-origins entry:
//
//   - every origin (the check is off)
//     null                   the opaque origin of sandboxed frames and file: pages
//     https://app.example    one origin; the port is the scheme's default unless given
//     https://*.example.com  that scheme on every subdomain
//     app.example:8888       a host pattern: any scheme; that port, or any port when none is given
//     *.example.com          a host pattern on every subdomain
func parseOriginRule(s string) (originRule, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "*":
		return originRule{any: true}, nil
	case "null":
		return originRule{null: true}, nil
	}
	var r originRule
	rest := s
	if scheme, after, ok := strings.Cut(s, "://"); ok {
		if !validScheme(scheme) {
			return originRule{}, fmt.Errorf("%q: scheme %q is not valid", s, scheme)
		}
		r.scheme = strings.ToLower(scheme)
		rest = strings.TrimSuffix(after, "/")
	}
	if strings.HasPrefix(rest, "*.") {
		r.suffix = "."
		rest = rest[2:]
	}
	h, err := ParseHost(rest)
	if err != nil {
		return originRule{}, fmt.Errorf("%q: %v", s, err)
	}
	if r.suffix != "" {
		if h.IP.IsValid() {
			return originRule{}, fmt.Errorf("%q: *. needs a host name after it, not an address", s)
		}
		r.suffix += h.Name
	}
	r.host, r.port = h, h.Port
	r.host.Port = 0
	if r.scheme != "" && r.port == 0 {
		r.port = defaultPort(r.scheme)
	}
	return r, nil
}

func (r originRule) match(o Origin) bool {
	switch {
	case r.any:
		return true
	case o.Null || r.null:
		return o.Null && r.null
	case r.scheme != "" && r.scheme != o.Scheme:
		return false
	case r.port != 0 && r.port != o.Host.Port:
		return false
	case r.suffix != "":
		return !o.Host.IP.IsValid() && strings.HasSuffix(o.Host.Name, r.suffix)
	}
	return r.host.SameHost(o.Host)
}
