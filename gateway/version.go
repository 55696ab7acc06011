package gateway

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// BuildInfo says which aiod this is.
type BuildInfo struct {
	Version   string `json:"version"`    // Version
	GoVersion string `json:"go_version"` // the Go release that built it, e.g. go1.26.8
	// Commit is the VCS revision the binary was built from (vcs.revision of
	// runtime/debug.ReadBuildInfo), or "unknown" when the build recorded
	// none: `go run`, `go test`, -buildvcs=false, or a tree without .git.
	Commit   string `json:"commit"`
	Modified bool   `json:"modified"` // the tree had uncommitted changes (vcs.modified)
}

// Build returns what the binary knows of its own build.
func Build() BuildInfo { return buildInfo() }

var buildInfo = sync.OnceValue(func() BuildInfo {
	b := BuildInfo{Version: Version, GoVersion: runtime.Version(), Commit: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if s.Value != "" {
					b.Commit = s.Value
				}
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	return b
})

// String is what `aiod --version` prints.
func (b BuildInfo) String() string {
	s := "aiod " + b.Version + " (" + b.GoVersion + ", commit " + b.Commit
	if b.Modified {
		s += ", modified"
	}
	return s + ")"
}
