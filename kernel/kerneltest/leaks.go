package kerneltest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Run runs a package's tests (m.Run) and then fails the run when they left
// a child process or a goroutine behind: the one leak check every package
// that starts processes or goroutines uses from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }
//
// after runs once the tests are done, before the checks (to close what the
// tests shared). Processes and goroutines on their way out get a few
// seconds. Goroutines of fasthttp's date updater and of idle HTTP client
// connections are not leaks. The result is the exit code.
func Run(m *testing.M, after ...func()) int {
	before := goleak.IgnoreCurrent()
	code := m.Run()
	for _, f := range after {
		f()
	}
	if code != 0 {
		return code
	}
	if kids := LiveChildren(5 * time.Second); len(kids) > 0 {
		fmt.Fprintf(os.Stderr, "leaked child processes: %s\n", strings.Join(kids, ", "))
		return 1
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := goleak.Find(before,
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		)
		if err == nil {
			return 0
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
}
