package main

import (
	"os/exec"
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

// TestImportRules checks the package layering docs/architecture.md describes:
//
//	cmd -> gateway -> stream, stream/backend, kernel/jupyter
//	stream/backend -> kernel, kernel/remote, replbridge, stream
//	kernel, kernel/remote, replbridge, stream -> kernel/jupyter
//	bench -> anything but gateway
//
// and never stream or replbridge -> the zmq kernel, gateway -> a runtime
// package, kernel* <-> replbridge.
func TestImportRules(t *testing.T) {
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
	for pkg, ours := range imports {
		for _, imp := range ours {
			var broken string
			switch {
			case pkg == "kernel/jupyter":
				broken = "the protocol leaf imports nothing of aiod's"
			case under(pkg, "gateway") && (imp == "kernel" || imp == "kernel/remote" || imp == "replbridge"):
				broken = "gateway asks stream/backend for runtimes and never builds one"
			case pkg == "stream" && imp != "kernel/jupyter":
				broken = "stream builds on the protocol leaf only"
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
	if d := deps("gateway"); !slices.Contains(d, mod+"/stream/backend") {
		t.Errorf("gateway does not depend on stream/backend; the rule checks nothing: %v", d)
	}
}
