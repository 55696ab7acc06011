package sandbox

import "testing"

func TestEgressRules(t *testing.T) {
	rules, err := ParseEgress([]string{"pypi.org:443", "*.pythonhosted.org:443", "10.0.0.5:3141", "[::1]:8080", "Example.COM.:80"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		port uint16
		ok   bool
	}{
		{"pypi.org", 443, true}, {"PyPI.org.", 443, true}, {"pypi.org", 80, false}, {"evil.pypi.org", 443, false},
		{"files.pythonhosted.org", 443, true}, {"pythonhosted.org", 443, false}, {"a.b.pythonhosted.org", 443, true},
		{"10.0.0.5", 3141, true}, {"10.0.0.6", 3141, false}, {"::1", 8080, true}, {"::ffff:10.0.0.5", 3141, true},
		{"example.com", 80, true}, {"xpypi.org", 443, false},
	} {
		if got := matchEgress(rules, c.host, c.port) != nil; got != c.ok {
			t.Errorf("%s:%d let through %v, want %v", c.host, c.port, got, c.ok)
		}
	}
	for _, bad := range []string{"pypi.org", "pypi.org:0", "pypi.org:http", ":443", "a/b:1", "*.*.x:1", "pypi.org:70000"} {
		if _, err := ParseEgress([]string{bad}); err == nil {
			t.Errorf("ParseEgress(%q) accepted", bad)
		}
	}
}
