package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/aiod/aiod"

// goList runs go list with a template over every package of the module
// (tests not included: the rules are about what the daemon links).
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// surfaces are the gateway's surface packages: each serves one protocol
// on the call core, and none imports another.
var surfaces = []string{"gateway/v1", "gateway/v2", "gateway/fswatch", "gateway/observe", "gateway/live", "gateway/jupyterapi", "gateway/mcp", "gateway/shell", "gateway/terminals"}

// TestImportRules checks the package layering docs/architecture.md describes:
//
//	cmd -> gateway -> the surfaces (v1, live, jupyterapi, mcp) -> gateway/call, gateway/wsock
//	gateway/call -> gateway/fsplane, gateway/guard, gateway/api, stream, stream/backend
//	stream/backend -> kernel, kernel/remote, replbridge, stream
//	stream -> stream/execution -> kernel/jupyter
//	kernel, kernel/remote, replbridge -> kernel/jupyter
//	bench -> anything but gateway
//
// and never: a surface -> another surface or the gateway package; the
// core and shared gateway packages -> a surface (gateway/gatewaytest, which
// starts whole gateways for other packages' tests, stands above the gateway
// as cmd/aiod does); stream or replbridge ->
// the zmq kernel; stream -> anything that speaks HTTP or WebSocket;
// gateway -> a runtime package; kernel* <-> replbridge.
func TestImportRules(t *testing.T) {
	t.Parallel()
	imports := map[string][]string{} // package -> its direct imports of the module's packages
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...") {
		f := strings.Fields(line)
		var ours []string
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, mod+"/") {
				ours = append(ours, strings.TrimPrefix(imp, mod+"/"))
			}
		}
		imports[strings.TrimPrefix(f[0], mod+"/")] = ours
	}
	if len(imports) < 10 {
		t.Fatalf("go list found only %d packages: %v", len(imports), imports)
	}
	deps := func(pkg string) []string { return goList(t, "-deps", "./"+pkg) }
	under := func(pkg, root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }
	surface := func(pkg string) bool { return slices.Contains(surfaces, pkg) }
	for _, sp := range surfaces {
		if _, ok := imports[sp]; !ok {
			t.Errorf("surface package %s does not exist: the rules below check nothing for it", sp)
		}
	}
	for pkg, ours := range imports {
		for _, imp := range ours {
			var broken string
			switch {
			case pkg == "kernel/jupyter":
				broken = "the protocol leaf imports nothing of aiod's"
			case under(pkg, "gateway") && (imp == "kernel" || imp == "kernel/remote" || imp == "replbridge"):
				broken = "gateway asks stream/backend for runtimes and never builds one"
			case surface(pkg) && (surface(imp) || imp == "gateway"):
				broken = "a surface runs on the call core and knows no other surface"
			case under(pkg, "gateway") && pkg != "gateway" && pkg != "gateway/gatewaytest" && !surface(pkg) && (surface(imp) || imp == "gateway"):
				broken = "the core and the shared gateway packages know no surface"
			case pkg == "stream/execution" && imp != "kernel/jupyter":
				broken = "the execution store builds on the protocol leaf only"
			case pkg == "stream" && imp != "kernel/jupyter" && imp != "stream/execution":
				broken = "stream builds on the protocol leaf and its execution store only"
			case (pkg == "kernel" || pkg == "kernel/remote") && imp == "replbridge",
				pkg == "replbridge" && (imp == "kernel" || imp == "kernel/remote"):
				broken = "kernels and native REPLs do not know each other"
			case (under(pkg, "kernel") || pkg == "replbridge") && (under(imp, "stream") || under(imp, "gateway")):
				broken = "runtimes do not know who routes their messages"
			case under(pkg, "bench") && under(imp, "gateway"):
				broken = "bench measures the daemon, not the gateway in-process"
			}
			if broken != "" {
				t.Errorf("%s imports %s: %s", pkg, imp, broken)
			}
		}
	}
	for _, pkg := range []string{"stream", "replbridge", "kernel/jupyter"} {
		if d := deps(pkg); slices.ContainsFunc(d, func(p string) bool { return strings.Contains(p, "go-zeromq/zmq4") }) {
			t.Errorf("%s links go-zeromq/zmq4; no part of it speaks ZeroMQ", pkg)
		}
	}
	for _, pkg := range []string{"stream", "stream/execution"} {
		for _, p := range deps(pkg) {
			if strings.Contains(p, "fasthttp") || p == "net/http" || strings.Contains(p, "coder/websocket") {
				t.Errorf("%s links %s: the session layer says what went wrong, the surfaces say it in their protocol", pkg, p)
			}
		}
	}
	if d := deps("gateway"); !slices.Contains(d, mod+"/stream/backend") {
		t.Errorf("gateway does not depend on stream/backend; the rule checks nothing: %v", d)
	}
}

// TestPackageSizes keeps the house readable: the gateway package itself
// (configuration, wiring, the v2 routes, discovery, the page) under 3,000
// lines, and no package over 3,500 (test files not counted). A package
// that outgrows it is split along a seam of its own, as stream's
// execution store and the gateway's surfaces were.
func TestPackageSizes(t *testing.T) {
	t.Parallel()
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{.Dir}} {{join .GoFiles \" \"}}", "./...") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		pkg, dir := strings.TrimPrefix(f[0], mod+"/"), f[1]
		n := 0
		for _, name := range f[2:] {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			n += bytes.Count(b, []byte("\n"))
		}
		limit := 3500
		if pkg == "gateway" {
			limit = 3000
		}
		if n > limit {
			t.Errorf("package %s has %d non-test lines, over its %d", pkg, n, limit)
		}
	}
}
