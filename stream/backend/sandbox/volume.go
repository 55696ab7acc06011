package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Volume is a folder of the host shown in every tenant's view (--volume
// HOST:PATH[:ro|rw]): read-only unless ReadWrite, always nosuid and
// nodev. All tenants see the same folder; with ReadWrite what one writes
// the others read, as the folder's owner and mode let each tenant's uid.
type Volume struct {
	Host      string `json:"host"`
	Path      string `json:"path"`
	ReadWrite bool   `json:"read_write"`
}

func (v Volume) String() string {
	mode := "ro"
	if v.ReadWrite {
		mode = "rw"
	}
	return v.Host + ":" + v.Path + ":" + mode
}

// ParseVolume reads HOST[:PATH][:ro|rw]: PATH defaults to HOST, the mode
// to ro. HOST is made absolute and its links resolved; CheckVolumes says
// whether the view can show it.
func ParseVolume(s string) (Volume, error) {
	parts := strings.Split(s, ":")
	var v Volume
	if last := parts[len(parts)-1]; len(parts) > 1 && (last == "ro" || last == "rw") {
		v.ReadWrite = last == "rw"
		parts = parts[:len(parts)-1]
	}
	switch len(parts) {
	case 1:
		v.Host, v.Path = parts[0], parts[0]
	case 2:
		v.Host, v.Path = parts[0], parts[1]
	default:
		return v, fmt.Errorf("volume %q: want HOST[:PATH][:ro|rw]", s)
	}
	if v.Host == "" || v.Path == "" {
		return v, fmt.Errorf("volume %q: want HOST[:PATH][:ro|rw]", s)
	}
	host, err := filepath.Abs(v.Host)
	if err != nil {
		return v, fmt.Errorf("volume %q: %w", s, err)
	}
	if host, err = filepath.EvalSymlinks(host); err != nil {
		return v, fmt.Errorf("volume %q: the host folder: %w", s, unwrapPathError(err))
	}
	v.Host = host
	return v, nil
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// CheckVolumes says why the view cannot show vols, given the state
// directory, the working folder and the tenant's HOME as runtimes see
// them. A volume's path must be an existing folder of the host (the view
// shows the host read-only, and nothing is made there), or a new folder
// under /home, which the view makes; never one of the folders the view
// replaces or gives the tenant (its HOME, the working folder, /tmp,
// /var/tmp, /dev/shm, /run), nor anything holding or inside the state
// directory, whose tenants' data the view hides.
func CheckVolumes(vols []Volume, state, workdir string) error {
	seen := map[string]bool{}
	for _, v := range vols {
		if err := checkVolume(v, state, workdir); err != nil {
			return fmt.Errorf("volume %s: %w", v, err)
		}
		for p := range seen {
			if under(v.Path, p) || under(p, v.Path) {
				return fmt.Errorf("volume %s: its path and %s hold one another: give each volume a folder of its own", v, p)
			}
		}
		seen[v.Path] = true
	}
	return nil
}

func checkVolume(v Volume, state, workdir string) error {
	if !filepath.IsAbs(v.Path) || filepath.Clean(v.Path) != v.Path {
		return fmt.Errorf("%q is not a clean absolute path", v.Path)
	}
	st, err := os.Stat(v.Host)
	switch {
	case err != nil:
		return fmt.Errorf("the host folder: %w", unwrapPathError(err))
	case !st.IsDir():
		return fmt.Errorf("%s is not a folder", v.Host)
	case state != "" && (under(v.Host, state) || under(state, v.Host)):
		return fmt.Errorf("the host folder %s and the state directory %s must not hold one another: the state directory holds every tenant's files", v.Host, state)
	case state != "" && (under(v.Path, state) || under(state, v.Path)):
		return fmt.Errorf("the path %s and the state directory %s must not hold one another", v.Path, state)
	}
	for _, c := range []string{"/", HomeBase, "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/var"} {
		if v.Path == c {
			return fmt.Errorf("%s would cover a folder runtimes need: choose a folder below it, e.g. /home/data or /mnt/data", v.Path)
		}
	}
	for _, c := range []string{"/tmp", "/var/tmp", "/dev", "/run", "/proc", "/sys", HomePath} {
		if under(v.Path, c) {
			return fmt.Errorf("%s is inside %s, which the view replaces or gives the tenant: choose a folder elsewhere, e.g. /home/data or /mnt/data", v.Path, c)
		}
	}
	if workdir != "" && (under(v.Path, workdir) || under(workdir, v.Path)) {
		return fmt.Errorf("the path %s and the working folder %s must not hold one another", v.Path, workdir)
	}
	if under(v.Path, HomeBase) {
		return nil // the view makes it in its own /home
	}
	if st, err := os.Stat(v.Path); err != nil || !st.IsDir() {
		return fmt.Errorf("%s is not a folder of the host: the view shows the host read-only and makes nothing there, so make the folder (empty) or choose one under /home (e.g. /home/data)", v.Path)
	}
	return nil
}
