package kernel

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/goccy/go-json"
)

func TestConnectionFile(t *testing.T) {
	t.Parallel()
	info, err := newConnectionInfo("python3")
	if err != nil {
		t.Fatal(err)
	}
	ports := map[int]bool{}
	for _, p := range []int{info.ShellPort, info.IOPubPort, info.StdinPort, info.ControlPort, info.HBPort} {
		if p <= 0 || ports[p] {
			t.Errorf("bad or repeated port %d", p)
		}
		ports[p] = true
	}
	if len(info.Key) != 64 || info.IP != "127.0.0.1" || info.Transport != "tcp" ||
		info.SignatureScheme != "hmac-sha256" || info.KernelName != "python3" {
		t.Errorf("info = %+v", info)
	}
	dir, path, err := writeConnectionFile(info)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if path != filepath.Join(dir, "kernel.json") {
		t.Errorf("path = %s", path)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v (%v)", p, st.Mode().Perm(), want, err)
		}
	}
	raw, _ := os.ReadFile(path)
	var back map[string]any
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port", "ip", "key", "transport", "signature_scheme", "kernel_name"} {
		if _, ok := back[k]; !ok {
			t.Errorf("connection file lacks %s: %s", k, raw)
		}
	}
}
