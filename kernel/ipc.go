package kernel

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
)

// Transports a local kernel's sockets can use (Options.Transport).
const (
	// TransportIPC puts the five sockets in the kernel's private folder
	// (mode 0700) as Unix sockets: no port to pick, none that can clash,
	// and none that another local user can reach.
	TransportIPC = "ipc"
	// TransportTCP binds five loopback TCP ports, reachable by every local
	// user (the signing key still protects the messages). Kept for
	// kernelspecs that are not ipykernel, which may not speak ipc.
	TransportTCP = "tcp"
)

// maxSocketPath is the longest Unix socket path Linux accepts (sun_path is
// 108 bytes with the terminating NUL).
const maxSocketPath = 107

// transport returns the transport a kernel of spec uses: the one asked for,
// else ipc for ipykernel specs and tcp for others. ipc falls back to tcp
// when the socket paths in dir would be too long for a Unix socket (a very
// long TMPDIR).
func transportFor(asked string, spec *Spec, dir string) (string, error) {
	switch asked {
	case "", TransportIPC, TransportTCP:
	default:
		return "", fmt.Errorf("transport %q: want %s or %s", asked, TransportIPC, TransportTCP)
	}
	t := asked
	if t == "" {
		t = TransportTCP
		if spec.IsIPyKernel() {
			t = TransportIPC
		}
	}
	if t == TransportIPC && len(ipcPrefix(dir))+len("-5") > maxSocketPath {
		t = TransportTCP
	}
	return t, nil
}

// ipcPrefix is the "ip" of an ipc connection file in dir: the kernel binds
// PREFIX-1 to PREFIX-5.
func ipcPrefix(dir string) string { return filepath.Join(dir, "k") }

// newIPCConnectionInfo describes sockets dir/k-1 ... dir/k-5 and a random
// 32-byte key.
func newIPCConnectionInfo(kernelName, dir string) (*connectionInfo, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("make key: %w", err)
	}
	return &connectionInfo{
		IP:              ipcPrefix(dir),
		Transport:       TransportIPC,
		ShellPort:       1,
		IOPubPort:       2,
		StdinPort:       3,
		ControlPort:     4,
		HBPort:          5,
		Key:             hex.EncodeToString(key),
		SignatureScheme: "hmac-sha256",
		KernelName:      kernelName,
	}, nil
}

// newConnection writes a kernel's connection file in its private folder
// dir, for the transport asked (see transportFor). view is where the kernel
// sees dir (the file names view; the info returned names dir, which aiod
// dials); confined kernels must use ipc.
func newConnection(kernelName, asked string, spec *Spec, dir, view string, confined bool) (conn *connectionInfo, path string, err error) {
	t, err := transportFor(asked, spec, dir)
	if err != nil {
		return nil, "", err
	}
	if t == TransportIPC && len(ipcPrefix(view))+len("-5") > maxSocketPath {
		t = TransportTCP
	}
	if t == TransportTCP && confined {
		return nil, "", errConfinedTCP
	}
	if t == TransportIPC {
		conn, err = newIPCConnectionInfo(kernelName, dir)
	} else {
		conn, err = newConnectionInfo(kernelName)
	}
	if err != nil {
		return nil, "", err
	}
	written := *conn
	if t == TransportIPC {
		written.IP = ipcPrefix(view)
	}
	path, err = writeConnectionFileIn(dir, &written)
	return conn, path, err
}
