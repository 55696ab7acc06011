package kernel

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
//
// Ports are picked below the kernel's ephemeral range: a port from bind(0)
// is in that range, and between our pick and the kernel's bind the OS may
// hand it to any outgoing connection (ours to other kernels included) as
// its source port. Ports below the range are never handed out that way.
func freePorts(n int) ([]int, error) {
	recentPorts.Lock()
	defer recentPorts.Unlock()
	now := time.Now()
	for p, t := range recentPorts.at {
		if now.Sub(t) > portHold {
			delete(recentPorts.at, p)
		}
	}
	lo, hi := portRange()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 50*n {
			return nil, fmt.Errorf("pick free port: none free in %d-%d after %d tries", lo, hi, tries)
		}
		p := lo + mrand.IntN(hi-lo)
		if _, taken := recentPorts.at[p]; taken || slices.Contains(ports, p) {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use
		}
		defer l.Close()
		ports = append(ports, p)
	}
	for _, p := range ports {
		recentPorts.at[p] = now
	}
	return ports, nil
}

// portRange is where kernel ports are picked: the 12,000 ports below the
// ephemeral range (/proc/sys/net/ipv4/ip_local_port_range, 32768 when
// unreadable), and never below 1024.
func portRange() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				hi = v
			}
		}
	}
	return max(1024, hi-12000), hi
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
