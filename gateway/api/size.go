package api

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseSize knows, each a power of 1024.
var sizeUnits = map[byte]float64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}

// ParseSize reads a size in bytes: a number, fractions allowed, with an
// optional K, M, G or T suffix (each a power of 1024, as ripgrep's
// --max-filesize and memory limits count) and an optional B or iB after
// it: "4096", "500k", "1.5MB", "512MiB", "2G", "1T". Case and spaces
// around the parts do not matter. A negative size, one that is not a
// number and one past what an int64 holds are errors; the caller says
// what it wanted in its own words.
func ParseSize(s string) (int64, error) {
	num := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B")
	mult := 1.0
	if unit := strings.TrimSuffix(num, "I"); unit != "" {
		if m, ok := sizeUnits[unit[len(unit)-1]]; ok {
			mult, num = m, unit[:len(unit)-1]
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || f < 0 || math.IsNaN(f) || f*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: want bytes, with an optional K, M, G or T suffix", s)
	}
	return int64(f * mult), nil
}
