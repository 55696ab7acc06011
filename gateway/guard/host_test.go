package guard

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseHost(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // Host.String(), or "" when ParseHost must fail
		loop bool
	}{
		{"localhost", "localhost", true},
		{"LOCALHOST", "localhost", true},
		{"LocalHost:18091", "localhost:18091", true},
		{"localhost.", "localhost", true},
		{"localhost.:80", "localhost:80", true},
		{"localhost..", "", false},
		{"localhost:", "localhost", true}, // empty port: RFC 3986 allows it
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.1:18091", "127.0.0.1:18091", true},
		{"127.0.0.1.:1", "127.0.0.1:1", true},
		{"127.255.3.4", "127.255.3.4", true},
		{"128.0.0.1", "128.0.0.1", false},
		{"0177.0.0.1", "0177.0.0.1", false}, // not an address for netip: a name, never loopback
		{"[::1]", "[::1]", true},
		{"[::1]:18091", "[::1]:18091", true},
		{"[0:0:0:0:0:0:0:1]:8", "[::1]:8", true},
		{"[::FFFF:127.0.0.1]", "127.0.0.1", true}, // IPv4-mapped: unmapped
		{"[fe80::1%25eth0]:9", "[fe80::1]:9", false},
		{"[2001:DB8::1]", "[2001:db8::1]", false},
		{"::1", "", false},         // IPv6 without brackets
		{"[::1", "", false},        // no closing bracket
		{"[::1]x", "", false},      // junk after the bracket
		{"[127.0.0.1]", "", false}, // brackets hold IPv6 only
		{"[evil.example]", "", false},
		{"user@localhost", "", false},
		{"evil.example@127.0.0.1", "", false},
		{"localhost/x", "", false},
		{"localhost?x", "", false},
		{"localhost#x", "", false},
		{`localhost\x`, "", false},
		{"local host", "", false},
		{"localhost:0", "", false},
		{"localhost:65536", "", false},
		{"localhost:65535", "localhost:65535", true},
		{"localhost:+80", "", false},
		{"localhost:8o", "", false},
		{"localhost:1:2", "", false},
		{"", "", false},
		{".", "", false},
		{"a..b", "", false},
		{"Bücher.Example", "xn--bcher-kva.example", false},
		{"xn--bcher-kva.example:443", "xn--bcher-kva.example:443", false},
		{"ｌｏｃａｌｈｏｓｔ", "localhost", true}, // full-width letters map to ASCII (UTS #46), as browsers do
		{"my_service", "my_service", false},
		{"evil%2eexample", "", false},
		{"a\x00b", "", false},
		{"\xff", "", false},
		{"localhost\r\n", "", false},
	} {
		h, err := ParseHost(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ParseHost(%q) = %q, want an error", tc.in, h)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseHost(%q): %v", tc.in, err)
			continue
		}
		if h.String() != tc.want || h.IsLoopback() != tc.loop {
			t.Errorf("ParseHost(%q) = %q loopback %v, want %q loopback %v", tc.in, h, h.IsLoopback(), tc.want, tc.loop)
		}
	}
}

func TestHostRules(t *testing.T) {
	for _, tc := range []struct {
		rule string
		yes  []string
		no   []string
	}{
		{"*", []string{"evil.example", "10.0.0.1:80", "[2001:db8::1]"}, nil},
		{"aiod.example.com", []string{"aiod.example.com", "AIOD.example.com.:8080", "aiod.example.com:1"}, []string{"x.aiod.example.com", "aiod.example.co", "example.com"}},
		{"*.example.com", []string{"a.example.com", "a.b.example.com:9", "A.EXAMPLE.COM."}, []string{"example.com", "aexample.com", "example.com.evil"}},
		{".example.com", []string{"a.example.com"}, []string{"example.com"}},
		{"10.1.2.3", []string{"10.1.2.3", "10.1.2.3:18091"}, []string{"10.1.2.4", "10.1.2.3.example"}},
		{"2001:db8::1", []string{"[2001:db8::1]", "[2001:DB8:0::1]:80"}, []string{"[2001:db8::2]"}},
		{"[2001:db8::1]", []string{"[2001:db8::1]"}, nil},
		{"bücher.example", []string{"xn--bcher-kva.example", "BÜCHER.example"}, []string{"bucher.example"}},
	} {
		r, err := parseHostRule(tc.rule)
		if err != nil {
			t.Errorf("rule %q: %v", tc.rule, err)
			continue
		}
		for _, s := range tc.yes {
			if h, err := ParseHost(s); err != nil || !r.match(h) {
				t.Errorf("rule %q does not match %q (%v)", tc.rule, s, err)
			}
		}
		for _, s := range tc.no {
			if h, err := ParseHost(s); err == nil && r.match(h) {
				t.Errorf("rule %q matches %q", tc.rule, s)
			}
		}
	}
	for _, bad := range []string{"", "x:8080", "*.", "*.10.0.0.1", "a b", "user@x", "http://x"} {
		if _, err := parseHostRule(bad); err == nil {
			t.Errorf("rule %q was accepted", bad)
		}
	}
}

// FuzzParseHost checks ParseHost's invariants on any input: no panic; a
// parsed host is in normal form (lower case ASCII, no trailing dot), and
// its String() parses back to the same host; it is loopback only when it
// is "localhost" or a loopback address.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"localhost", "LOCALHOST.:80", "[::1]:1", "127.0.0.1", "user@host", "Bücher.example", "[fe80::1%25en0]", "a..b", "xn--zz", "::1", "[::ffff:127.0.0.1]:8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHost(s)
		if err != nil {
			return
		}
		if !utf8.ValidString(h.Name) || strings.ToLower(h.Name) != h.Name || strings.HasSuffix(h.Name, ".") {
			t.Fatalf("ParseHost(%q) gave a name not in normal form: %q", s, h.Name)
		}
		for i := 0; i < len(h.Name); i++ {
			if h.Name[i] >= 0x80 {
				t.Fatalf("ParseHost(%q) gave a non-ASCII name %q", s, h.Name)
			}
		}
		if strings.ContainsAny(h.Name, "@/?#\\ %") {
			t.Fatalf("ParseHost(%q) kept a delimiter: %q", s, h.Name)
		}
		back, err := ParseHost(h.String())
		if err != nil || back != h {
			t.Fatalf("ParseHost(%q) = %#v, whose String %q parses to %#v (%v)", s, h, h.String(), back, err)
		}
		if h.IsLoopback() && !(h.Name == "localhost" || h.IP.IsLoopback()) {
			t.Fatalf("ParseHost(%q) = %q counts as loopback", s, h)
		}
	})
}
