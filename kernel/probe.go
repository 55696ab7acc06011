package kernel

import "strings"

// lastLine returns the last non-empty line of s, which for a Python
// traceback is the exception.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
