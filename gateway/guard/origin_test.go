package guard

import (
	"strings"
	"testing"
)

func TestParseOrigin(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want is the serialized origin, "" when parsing must fail
		port     int
	}{
		{"http://localhost:18091", "http://localhost:18091", 18091},
		{"HTTP://LOCALHOST:18091", "http://localhost:18091", 18091},
		{"http://localhost", "http://localhost", 80},
		{"http://localhost:80", "http://localhost", 80},
		{"https://localhost:443", "https://localhost", 443},
		{"https://aiod.example.com.", "https://aiod.example.com", 443},
		{"http://127.0.0.1:8888/", "http://127.0.0.1:8888", 8888},
		{"http://[::1]:18091", "http://[::1]:18091", 18091},
		{"http://[0::1]", "http://[::1]", 80},
		{"https://Bücher.example", "https://xn--bcher-kva.example", 443},
		{"chrome-extension://abcdefgh", "chrome-extension://abcdefgh", 0},
		{"null", "null", 0},
		{"NULL", "", 0},
		{"", "", 0},
		{"localhost:18091", "", 0},
		{"http://", "", 0},
		{"http://user@localhost", "", 0},
		{"http://user:pw@localhost:1", "", 0},
		{"http://localhost/path", "", 0},
		{"http://localhost?q", "", 0},
		{"http://localhost#f", "", 0},
		{"http://::1", "", 0},
		{"http://localhost:99999", "", 0},
		{"1http://localhost", "", 0},
		{"ht tp://localhost", "", 0},
		{"http://evil.example%00.localhost", "", 0},
	} {
		o, err := ParseOrigin(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ParseOrigin(%q) = %q, want an error", tc.in, o)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseOrigin(%q): %v", tc.in, err)
			continue
		}
		if o.String() != tc.want || o.Host.Port != tc.port {
			t.Errorf("ParseOrigin(%q) = %q port %d, want %q port %d", tc.in, o, o.Host.Port, tc.want, tc.port)
		}
	}
}

func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		origin, scheme, host string
		same                 bool
	}{
		{"http://127.0.0.1:18091", "http", "127.0.0.1:18091", true},
		{"http://localhost:18091", "http", "LOCALHOST.:18091", true},
		{"http://localhost", "http", "localhost:80", true},
		{"http://localhost:80", "http", "localhost", true},
		{"https://aiod.example", "https", "aiod.example:443", true},
		{"http://[::1]:18091", "http", "[0:0::1]:18091", true},
		{"http://xn--bcher-kva.example", "http", "bücher.example", true},
		{"http://127.0.0.1:18092", "http", "127.0.0.1:18091", false},  // another port is another origin
		{"https://127.0.0.1:18091", "http", "127.0.0.1:18091", false}, // another scheme
		{"http://localhost:18091", "http", "127.0.0.1:18091", false},  // another host, though the same machine
		{"http://evil.example:18091", "http", "evil.example:18092", false},
		{"null", "http", "127.0.0.1:18091", false},
	} {
		o, err := ParseOrigin(tc.origin)
		if err != nil {
			t.Fatalf("ParseOrigin(%q): %v", tc.origin, err)
		}
		h, err := ParseHost(tc.host)
		if err != nil {
			t.Fatalf("ParseHost(%q): %v", tc.host, err)
		}
		if got := o.SameOrigin(tc.scheme, h); got != tc.same {
			t.Errorf("%q same-origin with %s://%s: %v, want %v", tc.origin, tc.scheme, tc.host, got, tc.same)
		}
	}
}

func TestOriginRules(t *testing.T) {
	for _, tc := range []struct {
		rule string
		yes  []string
		no   []string
	}{
		{"*", []string{"https://evil.example", "null", "http://[::1]:1"}, nil},
		{"null", []string{"null"}, []string{"http://null", "http://localhost"}},
		{"https://good.example", []string{"https://good.example", "https://GOOD.example:443", "https://good.example."}, []string{"http://good.example", "https://good.example:8443", "https://a.good.example", "null"}},
		{"https://good.example/", []string{"https://good.example"}, nil},
		{"http://localhost:3000", []string{"http://localhost:3000"}, []string{"http://localhost:3001", "http://localhost"}},
		{"https://*.example.com", []string{"https://a.example.com", "https://a.b.example.com"}, []string{"https://example.com", "http://a.example.com", "https://a.example.com:8443", "https://evilexample.com"}},
		{"*.trusted.example", []string{"https://a.trusted.example", "http://b.trusted.example:8080"}, []string{"https://trusted.example", "https://a.trusted.example.evil"}},
		{"app.example:8888", []string{"http://app.example:8888", "https://app.example:8888"}, []string{"http://app.example", "http://app.example:8889"}},
		{"app.example", []string{"http://app.example", "https://app.example:1234"}, []string{"http://x.app.example"}},
		{"http://[::1]:3000", []string{"http://[::1]:3000", "http://[0::1]:3000"}, []string{"http://127.0.0.1:3000"}},
		{"https://bücher.example", []string{"https://xn--bcher-kva.example"}, nil},
	} {
		r, err := parseOriginRule(tc.rule)
		if err != nil {
			t.Errorf("rule %q: %v", tc.rule, err)
			continue
		}
		for _, s := range tc.yes {
			if o, err := ParseOrigin(s); err != nil || !r.match(o) {
				t.Errorf("rule %q does not match %q (%v)", tc.rule, s, err)
			}
		}
		for _, s := range tc.no {
			if o, err := ParseOrigin(s); err == nil && r.match(o) {
				t.Errorf("rule %q matches %q", tc.rule, s)
			}
		}
	}
	for _, bad := range []string{"", "http://", "https://user@x", "https://x/path", "*.", "https://*.10.0.0.1", "ht tp://x"} {
		if _, err := parseOriginRule(bad); err == nil {
			t.Errorf("rule %q was accepted", bad)
		}
	}
}

// FuzzParseOrigin checks that a parsed origin serializes to something that
// parses back to the same origin, keeps no delimiter, and that null is
// never the same origin as a request.
func FuzzParseOrigin(f *testing.F) {
	for _, s := range []string{"http://localhost:18091", "null", "https://Bücher.example", "http://[::1]:1", "http://user@x", "HTTP://X.:80/", "chrome-extension://id"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseOrigin(s)
		if err != nil {
			return
		}
		ser := o.String()
		back, err := ParseOrigin(ser)
		if err != nil || back != o {
			t.Fatalf("ParseOrigin(%q) = %#v, whose String %q parses to %#v (%v)", s, o, ser, back, err)
		}
		if strings.ContainsAny(strings.TrimPrefix(ser, o.Scheme+"://"), "@/?# ") {
			t.Fatalf("ParseOrigin(%q) serializes with a delimiter: %q", s, ser)
		}
		if o.Null && o.SameOrigin("http", Host{Name: "localhost"}) {
			t.Fatal("null is same-origin")
		}
	})
}
