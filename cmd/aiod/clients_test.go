package main

// What real clients and careful users tripped on (issue 26), each against
// the real binary.

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// walkthroughModules is a Python program that prints, one a line, the
// modules outside the standard library that the README's walkthrough
// (examples/walkthrough.py and the helper it imports) imports, and the
// file each one loads from.
const walkthroughModules = `
import ast, importlib, os, sys
here = sys.argv[1]
local = {os.path.splitext(f)[0] for f in os.listdir(here) if f.endswith(".py")}
seen = set()
for name in ("walkthrough.py", "aio.py"):
    tree = ast.parse(open(os.path.join(here, name)).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            mods = [node.module]
        else:
            continue
        for m in mods:
            top = m.split(".")[0]
            if top in sys.stdlib_module_names or top in local or top in seen:
                continue
            seen.add(top)
            print(top, importlib.import_module(top).__file__)
`

// Item 11: what make run installs (.ci/deps.sh run) covers every module
// the README's walkthrough imports: each one's file belongs to a Debian
// package on that list.
func TestMakeRunInstallsWhatTheWalkthroughImports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := exec.CommandContext(ctx, "bash", "../../.ci/deps.sh", "list", "run").Output()
	if err != nil {
		t.Fatalf(".ci/deps.sh list run: %v", err)
	}
	run := map[string]bool{}
	for _, p := range strings.Fields(string(list)) {
		run[p] = true
	}
	out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", walkthroughModules, "../../examples").CombinedOutput()
	if err != nil {
		t.Fatalf("the walkthrough's imports: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("the walkthrough imports nothing outside the standard library? (expected httpx at least)")
	}
	for _, line := range lines {
		mod, file, _ := strings.Cut(line, " ")
		owner, err := exec.CommandContext(ctx, "dpkg", "-S", file).Output()
		if err != nil {
			t.Errorf("module %s (%s) belongs to no Debian package: %v", mod, file, err)
			continue
		}
		pkg, _, _ := strings.Cut(strings.TrimSpace(string(owner)), ":")
		if !run[pkg] {
			t.Errorf("the walkthrough imports %s from Debian's %s, which `make run` (.ci/deps.sh run) does not install: %v", mod, pkg, strings.Fields(string(list)))
		}
	}
}
