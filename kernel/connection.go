package kernel

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

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

// endpoint returns the zmq endpoint of port, e.g. "tcp://127.0.0.1:5555".
func (c *connectionInfo) endpoint(port int) string {
	return fmt.Sprintf("%s://%s:%d", c.Transport, c.IP, port)
}

// newConnectionInfo picks five free loopback ports and a random 32-byte
// key. The ports are free when picked; the kernel binds them a moment
// later, as every Jupyter launcher does.
func newConnectionInfo(kernelName string) (*connectionInfo, error) {
	ports, err := freePorts(5)
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
		ShellPort:       ports[0],
		IOPubPort:       ports[1],
		StdinPort:       ports[2],
		ControlPort:     ports[3],
		HBPort:          ports[4],
		Key:             hex.EncodeToString(key),
		SignatureScheme: "hmac-sha256",
		KernelName:      kernelName,
	}, nil
}

// recentPorts holds ports handed to kernels in the last portHold: between
// freePorts closing its listener and the kernel binding the port, a kernel
// started concurrently could otherwise be given the same port.
var recentPorts = struct {
	sync.Mutex
	at map[int]time.Time
}{at: map[int]time.Time{}}

const portHold = time.Minute

// freePorts returns n distinct free TCP ports on 127.0.0.1, none handed
// out by this process in the last minute. All listeners stay open until
// every port is picked so that none is picked twice.
func freePorts(n int) ([]int, error) {
	recentPorts.Lock()
	defer recentPorts.Unlock()
	now := time.Now()
	for p, t := range recentPorts.at {
		if now.Sub(t) > portHold {
			delete(recentPorts.at, p)
		}
	}
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 20*n {
			return nil, fmt.Errorf("pick free port: no unused port after %d tries", tries)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick free port: %w", err)
		}
		defer l.Close()
		p := l.Addr().(*net.TCPAddr).Port
		if _, taken := recentPorts.at[p]; taken {
			continue
		}
		ports = append(ports, p)
	}
	for _, p := range ports {
		recentPorts.at[p] = now
	}
	return ports, nil
}

// writeConnectionFile creates a private folder (mode 0700) and writes the
// connection file into it (mode 0600). The caller removes dir when done.
func writeConnectionFile(info *connectionInfo) (dir, path string, err error) {
	dir, err = os.MkdirTemp("", "aiod-kernel-")
	if err != nil {
		return "", "", fmt.Errorf("write connection file: %w", err)
	}
	path = filepath.Join(dir, "kernel.json")
	data, err := json.MarshalIndent(info, "", "  ")
	if err == nil {
		err = os.WriteFile(path, data, 0o600)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("write connection file: %w", err)
	}
	return dir, path, nil
}

// removeAll removes the connection file's folder, logging a failure.
func removeAll(dir string, log *slog.Logger) {
	if err := os.RemoveAll(dir); err != nil {
		log.Warn("remove connection file", "err", err)
	}
}
