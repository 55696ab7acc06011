package guard

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Host is a parsed host[:port], normalized so that two spellings of one
// host compare equal: names in lower case, without their trailing dot, in
// their ASCII (punycode) form; IP addresses as netip.Addr, IPv4-mapped IPv6
// unmapped, zones dropped.
type Host struct {
	Name string     // the normalized name, or the address's text when IP is valid
	IP   netip.Addr // valid when the host is an IP literal
	Port int        // 0 when none was given
}

// String gives the host as it would appear in a Host header.
func (h Host) String() string {
	n := h.Name
	if h.IP.Is6() {
		n = "[" + n + "]"
	}
	if h.Port > 0 {
		n += ":" + strconv.Itoa(h.Port)
	}
	return n
}

// SameHost reports whether h and o name the same host, ports aside.
func (h Host) SameHost(o Host) bool {
	if h.IP.IsValid() || o.IP.IsValid() {
		return h.IP == o.IP
	}
	return h.Name == o.Name
}

// IsLoopback reports whether the host is "localhost" or a loopback address
// (127.0.0.0/8, ::1, and IPv4-mapped 127.x).
func (h Host) IsLoopback() bool {
	if h.IP.IsValid() {
		return h.IP.IsLoopback()
	}
	return h.Name == "localhost"
}

// ParseHost parses a Host header value (RFC 9110 §7.2: uri-host [":" port]).
// It refuses what no client sends for a real host and what could make one
// name look like another: userinfo ("user@host"), paths, spaces, bare IPv6
// without brackets, a port that is not 1-65535, empty labels. An empty
// port after the colon ("host:") counts as no port, as RFC 3986 allows.
func ParseHost(s string) (Host, error) {
	if s == "" {
		return Host{}, errors.New("empty host")
	}
	if len(s) > 1024 {
		return Host{}, errors.New("host longer than 1024 bytes")
	}
	if i := strings.IndexAny(s, "@/\\?#"); i >= 0 {
		return Host{}, fmt.Errorf("%q may not appear in a host", s[i])
	}
	hostPart, portPart := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return Host{}, errors.New("'[' without ']'")
		}
		hostPart, portPart = s[:end+1], s[end+1:]
		if portPart != "" {
			if portPart[0] != ':' {
				return Host{}, fmt.Errorf("unexpected %q after ']'", portPart)
			}
			portPart = portPart[1:]
		}
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if strings.IndexByte(s[:i], ':') >= 0 {
			return Host{}, errors.New("an IPv6 address must be in brackets")
		}
		hostPart, portPart = s[:i], s[i+1:]
	}
	h, err := parseHostName(hostPart)
	if err != nil {
		return Host{}, err
	}
	if portPart != "" {
		p, err := parsePort(portPart)
		if err != nil {
			return Host{}, err
		}
		h.Port = p
	}
	return h, nil
}

func parsePort(s string) (int, error) {
	if len(s) > 5 {
		return 0, fmt.Errorf("port %q is out of range", s)
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("port %q is not a number", s)
		}
	}
	p, _ := strconv.Atoi(s)
	if p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %q is out of range", s)
	}
	return p, nil
}

// parseHostName normalizes a host without its port: "[v6]", an IPv4
// address, or a name.
func parseHostName(s string) (Host, error) {
	if s == "" {
		return Host{}, errors.New("empty host name")
	}
	if strings.HasPrefix(s, "[") {
		if !strings.HasSuffix(s, "]") {
			return Host{}, errors.New("'[' without ']'")
		}
		inner := s[1 : len(s)-1]
		// RFC 6874 writes a zone as "%25zone"; netip wants "%zone".
		inner = strings.Replace(inner, "%25", "%", 1)
		a, err := netip.ParseAddr(inner)
		if err != nil || !a.Is6() {
			return Host{}, fmt.Errorf("%q is not an IPv6 address", inner)
		}
		return hostFromIP(a), nil
	}
	if strings.IndexByte(s, '%') >= 0 {
		return Host{}, errors.New("'%' may not appear in a host name")
	}
	name := strings.TrimSuffix(s, ".") // "localhost." is "localhost"
	if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
		return hostFromIP(a), nil
	}
	n, err := normalizeName(name)
	if err != nil {
		return Host{}, err
	}
	return Host{Name: n}, nil
}

func hostFromIP(a netip.Addr) Host {
	a = a.Unmap().WithZone("")
	return Host{Name: a.String(), IP: a}
}

// normalizeName lowercases an ASCII name and checks its labels (letters,
// digits, '-' and '_', which service names in containers use); a name with
// other characters goes through IDNA's lookup mapping (UTS #46, as browsers
// apply it) to its punycode form.
func normalizeName(s string) (string, error) {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if !ascii {
		if !utf8.ValidString(s) {
			return "", errors.New("host name is not valid UTF-8")
		}
		a, err := idna.Lookup.ToASCII(s)
		if err != nil {
			return "", fmt.Errorf("host name %q: %v", s, err)
		}
		s = a
	}
	s = strings.ToLower(s)
	if len(s) > 253 {
		return "", errors.New("host name longer than 253 bytes")
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" {
			return "", fmt.Errorf("host name %q has an empty label", s)
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("host name %q: %q may not appear in a name", s, c)
			}
		}
	}
	return s, nil
}

// hostRule is one --allowed-hosts entry.
type hostRule struct {
	any    bool   // "*"
	suffix string // "*.example.com" or ".example.com": ".example.com", any subdomain
	host   Host   // an exact name or address
}

// parseHostRule reads an --allowed-hosts entry: "*", a name, "*.name" (or
// ".name") for its subdomains, or an IP address (IPv6 with or without
// brackets). Ports are not part of the rule: the Host check is about names.
func parseHostRule(s string) (hostRule, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "*":
		return hostRule{any: true}, nil
	case strings.HasPrefix(s, "*.") || strings.HasPrefix(s, "."):
		h, err := parseHostName(strings.TrimPrefix(strings.TrimPrefix(s, "*"), "."))
		if err != nil || h.IP.IsValid() {
			return hostRule{}, fmt.Errorf("%q: want *.NAME with a host name after the dot", s)
		}
		return hostRule{suffix: "." + h.Name}, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return hostRule{host: hostFromIP(a)}, nil
	}
	h, err := ParseHost(s)
	if err != nil {
		return hostRule{}, fmt.Errorf("%q: %v", s, err)
	}
	if h.Port != 0 {
		return hostRule{}, fmt.Errorf("%q: give the host without a port (any port is allowed)", s)
	}
	return hostRule{host: h}, nil
}

func (r hostRule) match(h Host) bool {
	switch {
	case r.any:
		return true
	case r.suffix != "":
		return !h.IP.IsValid() && strings.HasSuffix(h.Name, r.suffix)
	}
	return r.host.SameHost(h)
}
