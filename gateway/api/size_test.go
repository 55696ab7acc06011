package api

import "testing"

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096}, {"0", 0}, {"10B", 10},
		{"500k", 500 << 10}, {"64kB", 64 << 10}, {"1KiB", 1 << 10}, {"1Ki", 1 << 10},
		{"1M", 1 << 20}, {"1.5MB", 3 << 19}, {"512MiB", 512 << 20}, {"512mib", 512 << 20},
		{"2G", 2 << 30}, {"1.5g", 3 << 29}, {"1T", 1 << 40}, {"2TiB", 2 << 40},
		{" 1 M ", 1 << 20}, {"1073741824", 1 << 30},
	} {
		if got, err := ParseSize(c.in); err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", " ", "M", "MB", "B", "iB", "1I", "1IB", "-1K", "-1", "lots", "1P", "1MM",
		"NaN", "Inf", "1e30", "9000000T", "1K5"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}
