package kernel

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/aiod/aiod/kernel/ports"
	"github.com/goccy/go-json"
)

// connectionInfo is the content of a Jupyter connection file: where the
// kernel listens and how messages are signed.
type connectionInfo struct {
	IP              string `json:"ip"`
	Transport       string `json:"transport"`
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	Key             string `json:"key"`
	SignatureScheme string `json:"signature_scheme"`
	KernelName      string `json:"kernel_name"`
}

// address returns where aiod dials for port: ("tcp", "127.0.0.1:5555"),
// or for Jupyter's ipc transport ("unix", "/tmp/aiod-kernel-123/k-1")
// (Jupyter's convention: the "ip" field is a path prefix, the port its
// suffix).
func (c *connectionInfo) address(port int) (network, addr string) {
	if c.Transport == TransportIPC {
		return "unix", fmt.Sprintf("%s-%d", c.IP, port)
	}
	return "tcp", net.JoinHostPort(c.IP, strconv.Itoa(port))
}

// newConnectionInfo picks five free loopback ports and a random 32-byte
// key. The ports are free when picked; the kernel binds them a moment
// later, as every Jupyter launcher does.
func newConnectionInfo(kernelName string) (*connectionInfo, error) {
	picked, err := ports.Free(5)
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("make key: %w", err)
	}
	return &connectionInfo{
		IP:              "127.0.0.1",
		Transport:       "tcp",
		ShellPort:       picked[0],
		IOPubPort:       picked[1],
		StdinPort:       picked[2],
		ControlPort:     picked[3],
		HBPort:          picked[4],
		Key:             hex.EncodeToString(key),
		SignatureScheme: "hmac-sha256",
		KernelName:      kernelName,
	}, nil
}

// writeConnectionFile creates a private folder (mode 0700) and writes the
// connection file into it (mode 0600). The caller removes dir when done.
func writeConnectionFile(info *connectionInfo) (dir, path string, err error) {
	dir, err = makeConnectionDir("")
	if err != nil {
		return "", "", err
	}
	path, err = writeConnectionFileIn(dir, info)
	if err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, path, nil
}

// MaxConnDir is the longest Options.ConnDir a kernel's private folder is
// made in; a longer one is replaced by the temporary folder. A socket's
// address holds 107 bytes, and "/aiod-kernel-", ten digits and "/k-5"
// take 27 of them.
const MaxConnDir = 72

// makeConnectionDir creates a kernel's private folder (mode 0700) in
// parent, or in the temporary folder when parent is "" or longer than
// MaxConnDir: its connection file and ipc sockets live there.
func makeConnectionDir(parent string) (string, error) {
	if len(parent) > MaxConnDir {
		parent = ""
	}
	dir, err := os.MkdirTemp(parent, "aiod-kernel-")
	if err != nil {
		return "", fmt.Errorf("make connection folder: %w", err)
	}
	return dir, nil
}

// writeConnectionFileIn writes info to dir/kernel.json (mode 0600).
func writeConnectionFileIn(dir string, info *connectionInfo) (string, error) {
	path := filepath.Join(dir, "kernel.json")
	data, err := json.MarshalIndent(info, "", "  ")
	if err == nil {
		err = os.WriteFile(path, data, 0o600)
	}
	if err != nil {
		return "", fmt.Errorf("write connection file: %w", err)
	}
	return path, nil
}

// removeAll removes the connection file's folder, logging a failure.
func removeAll(dir string, log *slog.Logger) {
	if err := os.RemoveAll(dir); err != nil {
		log.Warn("remove connection file", "err", err)
	}
}
