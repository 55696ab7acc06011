package kernel

import (
	"errors"
	"os"
	"os/exec"
	"syscall"

	"github.com/goccy/go-json"
)

// Confinement is how a kernel is confined (aiod's tenant isolation). The
// kernel package only carries it: Options.Confine makes it once the
// kernel's private folder exists.
type Confinement struct {
	// View is the private folder as the kernel sees it: the connection
	// file names it (the -f argument, the ipc socket prefix), while aiod
	// dials the sockets at the folder's own path. "" is the same path.
	View string
	// Plan is what a forked kernel's child applies before the kernel app
	// exists (TemplateConfig.Confine); Files are the descriptors it refers
	// to, sent with the fork request. The caller keeps them open.
	Plan  json.RawMessage
	Files []*os.File
	// Wrap confines a spawned kernel's command.
	Wrap func(*exec.Cmd)
	// Owner is given the private folder and the connection file (the
	// kernel runs as that user).
	Owner *syscall.Credential
}

// errConfinedTCP refuses a confined kernel that would listen on TCP: its
// ports would be in its own network namespace, out of aiod's reach.
var errConfinedTCP = errors.New("a confined kernel needs the ipc transport (its TCP ports would be in its own network namespace); this kernelspec or --kernel-transport asks for tcp")
