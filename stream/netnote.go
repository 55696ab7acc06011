package stream

import (
	"slices"
	"strings"

	"github.com/aiod/aiod/stream/execution"
)

// networkMarks are what a failed name lookup or connection says, in the
// runtimes aiod runs: glibc's resolver (Python, pip, curl, bash), Node.js
// and urllib3.
var networkMarks = []string{
	"Temporary failure in name resolution",
	"Name or service not known",
	"No address associated with hostname",
	"Network is unreachable",
	"getaddrinfo EAI_AGAIN",
	"getaddrinfo ENOTFOUND",
	"Could not resolve host",
	"Failed to establish a new connection",
}

// networkScan is how much of the end of each stream output networkFailure
// reads: a pip or curl failure says so last.
const networkScan = 64 << 10

// networkFailure reports whether a failed call's error or the end of its
// streams says that a name lookup or a connection failed.
func networkFailure(res *execution.Result) bool {
	has := func(s string) bool {
		for _, m := range networkMarks {
			if strings.Contains(s, m) {
				return true
			}
		}
		return false
	}
	for _, o := range res.Outputs {
		switch o.Type {
		case "error":
			if has(o.Evalue) || slices.ContainsFunc(o.Traceback, has) {
				return true
			}
		case "stream":
			if has(o.Text[max(0, len(o.Text)-networkScan):]) {
				return true
			}
		}
	}
	return false
}
