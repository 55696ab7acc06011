package sandbox

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Network modes of tenant runtimes (--runtime-network).
const (
	NetworkNone = "none" // a network namespace per tenant with its own loopback only
	NetworkHost = "host" // the host's network
)

// Config configures Tenants.
type Config struct {
	// StateDir is aiod's state directory; tenants' folders live in its
	// "tenants" folder. It is created with mode 0700.
	StateDir string
	// FirstUID and LastUID bound the uids (and gids) tenants get, one
	// each, kept across restarts; both 0 claims the state directory's own
	// block (uidauto.go).
	FirstUID, LastUID uint32
	// Workdir is the working folder as runtimes see it (--workdir).
	Workdir string
	// Volumes are host folders every tenant's view shows (--volume).
	Volumes []Volume
	// Network is NetworkNone, NetworkAllow or NetworkHost.
	Network string
	// Egress is what the egress proxy lets through (NetworkAllow).
	Egress []EgressRule
	// Ptys is View.Ptys of every tenant's runtimes: 0 keeps the host's
	// devpts.
	Ptys   int
	Logger *slog.Logger
}

// UserName is the tenant's account name in its view's /etc/passwd, and
// HomePath its HOME.
const (
	UserName = "user"
	HomePath = HomeBase + "/" + UserName
)

// Tenants keeps every tenant's folders, uid and network namespace. Create
// it with NewTenants and release it with Close after every runtime is gone.
type Tenants struct {
	cfg     Config
	log     *slog.Logger
	dir     string // StateDir/tenants
	seccomp []byte

	egress EgressStats // the egress proxies' decisions

	release func() // gives the uid range back

	mu      sync.Mutex
	byKey   map[string]*Tenant     // guarded by mu
	making  map[string]*making     // guarded by mu: tenants being made, by key (Get waits for them)
	sparing bool                   // guarded by mu: MakeSpare is making the spare
	used    map[uint32]string      // guarded by mu: uid -> folder
	closed  bool                   // guarded by mu
	spare   *Tenant                // guarded by mu: the sandbox made ahead for the next new tenant (spare.go); nil: none
	onAdopt func(spare, t *Tenant) // guarded by mu: OnAdopt's f

	idleStop, idleDone chan struct{}    // ReleaseIdle's janitor: closed by Close, closed when it is over
	beforeRelease      func(key string) // BeforeRelease's
}

// Tenant is one tenant: a caller of aiod (a JWT subject, the API token,
// or "default" without credentials).
type Tenant struct {
	Key      string // the caller's key, e.g. "jwt:alice"
	Dir      string // its folder in the state directory
	UID, GID uint32
	view     View
	net      *os.File     // its network namespace; nil with the host's network
	proxy    *egressProxy // its egress proxy (NetworkAllow)
	files    *Files       // its file helper's client, made on first use; guarded by Tenants.mu
	used     time.Time    // guarded by Tenants.mu: its last Get
	holds    int          // guarded by Tenants.mu: starts under way in it (Use)
	// hooked is when BeforeRelease's call for it last returned: a tenant
	// not used since is not called for again (what the call started may
	// keep it a while: its pools). Guarded by Tenants.mu.
	hooked   time.Time
	released atomic.Bool // let go after idling (release.go): Get makes it anew
}

// NewTenants makes the state directory and reads the tenants it already
// holds (their uids are kept).
func NewTenants(cfg Config) (*Tenants, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Network == "" {
		cfg.Network = NetworkNone
	}
	if cfg.Network != NetworkNone && cfg.Network != NetworkHost && cfg.Network != NetworkAllow {
		return nil, fmt.Errorf("runtime network %q: want none, allow or host", cfg.Network)
	}
	if (cfg.FirstUID != 0 || cfg.LastUID != 0) && (cfg.FirstUID == 0 || cfg.LastUID < cfg.FirstUID) {
		return nil, fmt.Errorf("tenant uids %d-%d: want FIRST-LAST above 0", cfg.FirstUID, cfg.LastUID)
	}
	state, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if under(state, HomeBase) {
		return nil, fmt.Errorf("state directory %s is under %s, which every tenant view replaces: choose one elsewhere (e.g. /var/lib/aiod)", state, HomeBase)
	}
	cfg.StateDir = state
	if err := CheckWorkdir(cfg.Workdir, state); err != nil {
		return nil, fmt.Errorf("working folder: %w", err)
	}
	if err := CheckVolumes(cfg.Volumes, state, cfg.Workdir); err != nil {
		return nil, err
	}
	seccomp, err := Filter()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, fmt.Errorf("make the state directory: %w", err)
	}
	first, last, release, err := claimUIDs(state, cfg.FirstUID, cfg.LastUID)
	if err != nil {
		return nil, err
	}
	cfg.FirstUID, cfg.LastUID = first, last
	ts := &Tenants{cfg: cfg, log: cfg.Logger, dir: filepath.Join(state, "tenants"), seccomp: seccomp,
		byKey: map[string]*Tenant{}, making: map[string]*making{}, used: map[uint32]string{}, release: release}
	ok := false
	defer func() {
		if !ok {
			release()
		}
	}()
	if err := os.MkdirAll(ts.dir, 0o700); err != nil {
		return nil, fmt.Errorf("make the state directory: %w", err)
	}
	for _, d := range []string{state, ts.dir} {
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("make the state directory private: %w", err)
		}
	}
	ents, err := os.ReadDir(ts.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), sparePrefix) {
			// A spare left by a daemon that did not close: no tenant ever
			// used it, so it goes, and its uid is free again (if it cannot
			// go, its uid stays taken, below).
			err := os.RemoveAll(filepath.Join(ts.dir, e.Name()))
			if err == nil {
				ts.log.Info("removed a spare sandbox left by a stopped daemon", "dir", e.Name())
				continue
			}
			ts.log.Warn("remove a spare sandbox left by a stopped daemon", "dir", e.Name(), "err", err)
		}
		if b, err := os.ReadFile(filepath.Join(ts.dir, e.Name(), "uid")); err == nil {
			if uid, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil {
				ts.used[uint32(uid)] = e.Name()
			}
		}
	}
	ts.killLeftovers()
	ok = true
	return ts, nil
}

// Egress counts the egress proxies' decisions (NetworkAllow).
func (ts *Tenants) Egress() (allowed, refused uint64) {
	return ts.egress.Allowed.Load(), ts.egress.Refused.Load()
}

// EgressRules is what the egress proxies let through.
func (ts *Tenants) EgressRules() []EgressRule { return ts.cfg.Egress }

// StateDir is the state directory, absolute.
func (ts *Tenants) StateDir() string { return ts.cfg.StateDir }

// Network is the tenants' network mode.
func (ts *Tenants) Network() string { return ts.cfg.Network }

// UIDRange is the first and last uid tenants get.
func (ts *Tenants) UIDRange() (uint32, uint32) { return ts.cfg.FirstUID, ts.cfg.LastUID }

// IsTenantUID reports whether uid is in the tenants' range.
func (ts *Tenants) IsTenantUID(uid uint32) bool {
	return uid >= ts.cfg.FirstUID && uid <= ts.cfg.LastUID
}

// Get returns the tenant of key, making its folders, uid and network
// namespace on first use: a tenant aiod has no folder of adopts the spare
// sandbox when there is one (spare.go).
//
// A new tenant is made without the registry's lock (its folders, network
// namespace and egress proxy take milliseconds): other tenants are served
// meanwhile, and a second Get of the same key waits for the first.
func (ts *Tenants) Get(key string) (*Tenant, error) {
	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		return nil, errShuttingDown
	}
	if t := ts.byKey[key]; t != nil {
		t.used = time.Now()
		ts.mu.Unlock()
		return t, nil
	}
	if m := ts.making[key]; m != nil {
		ts.mu.Unlock()
		<-m.done
		return m.t, m.err
	}
	if t := ts.adoptSpare(key); t != nil {
		t.used = time.Now()
		ts.byKey[key] = t
		ts.mu.Unlock()
		return t, nil
	}
	m := &making{done: make(chan struct{})}
	ts.making[key] = m
	ts.mu.Unlock()
	testHookMake(key)
	t, err := ts.make(key, folderName(key))
	ts.mu.Lock()
	delete(ts.making, key)
	switch {
	case err != nil:
		err = fmt.Errorf("make the sandbox of tenant %q: %w", key, err)
	case ts.closed:
		t.release()
		t, err = nil, errShuttingDown
	default:
		t.used = time.Now()
		ts.byKey[key] = t
		ts.log.Info("tenant ready", "tenant", key, "uid", t.UID, "dir", t.Dir)
	}
	m.t, m.err = t, err
	ts.mu.Unlock()
	close(m.done)
	return t, err
}

// Count is how many tenants' sandboxes aiod holds (the spare aside).
func (ts *Tenants) Count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.byKey)
}

// Peek is the tenant of key that aiod holds now, without making it or
// counting a use (an observer must not keep a tenant from idling): nil
// when it has none, or let it go.
func (ts *Tenants) Peek(key string) *Tenant {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.byKey[key]; t != nil && !t.Released() {
		return t
	}
	return nil
}

// making is a tenant one Get is making; others wait for done.
type making struct {
	done chan struct{}
	t    *Tenant
	err  error
}

var errShuttingDown = errors.New("aiod is shutting down")

// testHookMake runs before a new tenant is made (tests).
var testHookMake = func(key string) {}

// release closes what a tenant nobody will use holds: its network
// namespace (runtimes in it keep it) and egress proxy.
func (t *Tenant) release() {
	if t.net != nil {
		t.net.Close()
	}
	if t.proxy != nil {
		t.proxy.close()
	}
}

// make builds a tenant in the folder name, without ts.mu.
func (ts *Tenants) make(key, name string) (*Tenant, error) {
	dir := filepath.Join(ts.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	uid, err := ts.uidOf(dir, name, key)
	if err != nil {
		return nil, err
	}
	t := &Tenant{Key: key, Dir: dir, UID: uid, GID: uid}
	v := View{
		Home: filepath.Join(dir, "home"), Tmp: filepath.Join(dir, "tmp"), VarTmp: filepath.Join(dir, "var-tmp"),
		Shm: filepath.Join(dir, "shm"), Work: filepath.Join(dir, "work"),
		HomePath: HomePath, WorkPath: ts.cfg.Workdir, Hide: []string{ts.cfg.StateDir},
		UID: uid, GID: uid, Net: -1, Seccomp: ts.seccomp, Ptys: ts.cfg.Ptys, Volumes: ts.cfg.Volumes,
	}
	if v.WorkPath == v.HomePath {
		v.Work = "" // the tenant works in its HOME
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{v.Home, 0o700}, {v.Tmp, 0o1777}, {v.VarTmp, 0o1777}, {v.Shm, 0o1777}, {v.Work, 0o755}} {
		if f.path == "" {
			continue
		}
		if err := ownedDir(f.path, f.mode, uid); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat("/var/tmp"); err != nil {
		v.VarTmp = ""
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		v.Shm = ""
	}
	// A working folder inside one of the tenant's own folders must exist
	// there for the view to mount the work folder on it.
	for _, m := range []struct{ at, backing string }{{"/tmp", v.Tmp}, {"/var/tmp", v.VarTmp}, {"/dev/shm", v.Shm}} {
		if m.backing != "" && under(v.WorkPath, m.at) {
			rel, _ := filepath.Rel(m.at, v.WorkPath)
			if err := ownedPath(m.backing, rel, uid); err != nil {
				return nil, err
			}
		}
	}
	if v.Passwd, v.Group, err = accounts(dir, uid); err != nil {
		return nil, err
	}
	if ts.cfg.Network != NetworkHost {
		var ln net.Listener
		if t.net, ln, err = newNetns(ts.cfg.Network == NetworkAllow); err != nil {
			return nil, err
		}
		v.Net = 0
		if ln != nil {
			t.proxy = newEgressProxy(key, ln, ts.cfg.Egress, &ts.egress, ts.log)
		}
	}
	t.view = v
	return t, nil
}

// uidOf is the uid kept in dir, or the lowest free one of the range, kept
// there from now on.
func (ts *Tenants) uidOf(dir, name, key string) (uint32, error) {
	if b, err := os.ReadFile(filepath.Join(dir, "uid")); err == nil {
		uid, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if err == nil && uid > 0 {
			return uint32(uid), nil
		}
	}
	live := processesOf(ts.IsTenantUID) // read before the lock: it takes milliseconds
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for uid := ts.cfg.FirstUID; ; uid++ {
		if _, taken := ts.used[uid]; !taken {
			if len(live[uid]) == 0 {
				return uid, ts.keepUID(dir, name, key, uid)
			}
			// Not this daemon's (its own tenants' leftovers went when it
			// started): whoever runs as it would see the tenant's files and
			// processes.
			ts.log.Warn("tenant uid skipped: processes run as it", "uid", uid, "pids", live[uid])
		}
		if uid == ts.cfg.LastUID {
			return 0, fmt.Errorf("every uid of --tenant-uids %d-%d is taken by a tenant or runs a process: widen the range", ts.cfg.FirstUID, ts.cfg.LastUID)
		}
	}
}

// keepUID gives uid to the tenant of key in dir (the folder name), kept
// there from now on; ts.mu is held.
func (ts *Tenants) keepUID(dir, name, key string, uid uint32) error {
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte(key+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "uid"), []byte(strconv.FormatUint(uint64(uid), 10)+"\n"), 0o600); err != nil {
		return err
	}
	ts.used[uid] = name
	return nil
}

// folderName is a tenant's folder: its key made safe for a file name, and
// a hash that keeps keys apart that read the same once made safe.
func folderName(key string) string {
	var b strings.Builder
	for _, r := range key {
		if b.Len() >= 40 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(key))
	return strings.TrimLeft(b.String(), ".") + "-" + hex.EncodeToString(sum[:5])
}

// ownedDir makes dir (mode mode) owned by uid. A dir that exists is
// changed through a descriptor opened without following a link: one a
// tenant planted there (a --workdir under /tmp) would otherwise have aiod
// chmod and chown whatever it points at.
func ownedDir(dir string, mode os.FileMode, uid uint32) error {
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open folder (no links)", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, uint32(mode.Perm())); err != nil {
		return &os.PathError{Op: "chmod", Path: dir, Err: err}
	}
	if err := unix.Fchown(fd, int(uid), int(uid)); err != nil {
		return &os.PathError{Op: "chown", Path: dir, Err: err}
	}
	return nil
}

// ownedPath makes the folders of rel under base, owned by uid.
func ownedPath(base, rel string, uid uint32) error {
	p := base
	for _, part := range strings.Split(rel, "/") {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil:
			return fmt.Errorf("%s is in the way of the working folder", p)
		}
		if err := ownedDir(p, 0o755, uid); err != nil {
			return err
		}
	}
	return nil
}

// accounts writes the view's /etc/passwd and /etc/group: the host's, and
// the tenant's account (UserName, HOME HomePath) with its uid.
func accounts(dir string, uid uint32) (passwd, group string, err error) {
	id := strconv.FormatUint(uint64(uid), 10)
	passwd = filepath.Join(dir, "passwd")
	group = filepath.Join(dir, "group")
	for _, f := range []struct{ host, out, line string }{
		{"/etc/passwd", passwd, UserName + ":x:" + id + ":" + id + ":aiod tenant:" + HomePath + ":/bin/bash\n"},
		{"/etc/group", group, UserName + ":x:" + id + ":\n"},
	} {
		host, err := os.ReadFile(f.host)
		if err != nil {
			return "", "", fmt.Errorf("read %s: %w", f.host, err)
		}
		var out bytes.Buffer
		sc := bufio.NewScanner(bytes.NewReader(host))
		for sc.Scan() {
			line := sc.Text()
			if name, _, _ := strings.Cut(line, ":"); name == UserName {
				continue // the tenant's account takes the name
			}
			out.WriteString(line + "\n")
		}
		out.WriteString(f.line)
		if err := os.WriteFile(f.out, out.Bytes(), 0o644); err != nil {
			return "", "", err
		}
	}
	return passwd, group, nil
}

// newNetns makes a network namespace with its loopback up and returns a
// descriptor of it. The work is done on a thread locked to this goroutine,
// which goes back to aiod's own namespace before it is unlocked; if it
// cannot, it stays locked, and Go ends (or, the main thread, parks) it
// with the goroutine, so no other goroutine ever runs in the new
// namespace. (A thread left there would also change what /proc/net shows
// aiod when it is the main thread.)
//
// With proxy, a listening socket at ProxyPort on the namespace's loopback
// is made there too, for the egress proxy.
func newNetns(proxy bool) (*os.File, net.Listener, error) {
	type result struct {
		f   *os.File
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{nil, nil, fmt.Errorf("open aiod's network namespace: %w", err)}
			return
		}
		defer own.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, nil, fmt.Errorf("make a network namespace: %w", err)}
			return
		}
		var ln net.Listener
		f, err := os.Open("/proc/thread-self/ns/net")
		if err == nil {
			err = loUp()
		}
		if err == nil && proxy {
			// The socket is made by this thread, so in the namespace; it
			// stays there when aiod accepts on it from its own.
			ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ProxyPort))
		}
		if err != nil && f != nil {
			f.Close()
			f = nil
		}
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{f, ln, err}
	}()
	r := <-ch
	return r.f, r.ln, r.err
}

// View is what the tenant's runtimes see.
func (t *Tenant) View() *View {
	v := t.view
	return &v
}

// Files are the descriptors a plan of the tenant's view refers to (its
// network namespace), in the order the plan indexes them.
func (t *Tenant) Files() []*os.File {
	if t.net == nil {
		return nil
	}
	return []*os.File{t.net}
}

// Close releases every tenant's network namespace (runtimes still in it
// keep it alive) and kills every process still running as a tenant's uid,
// before the uid range is given back: call it once the runtimes are closed.
func (ts *Tenants) Close() error {
	ts.stopReleasing()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	var all []*Files
	var proxies []*egressProxy
	if sp := ts.spare; sp != nil {
		ts.spare = nil
		if sp.net != nil {
			sp.net.Close()
		}
		if sp.proxy != nil {
			proxies = append(proxies, sp.proxy)
		}
		ts.removeSpare(sp.Dir)
	}
	for _, t := range ts.byKey {
		if t.net != nil {
			t.net.Close()
		}
		if t.files != nil {
			all = append(all, t.files)
		}
		if t.proxy != nil {
			proxies = append(proxies, t.proxy)
		}
	}
	used := maps.Clone(ts.used)
	ts.mu.Unlock()
	var wg sync.WaitGroup
	for _, f := range all {
		wg.Go(f.Close)
	}
	for _, p := range proxies {
		wg.Go(p.close)
	}
	wg.Wait()
	// The runtimes are closed by now (their groups killed what ran in
	// them); what still runs as a tenant escaped them, or had none.
	ts.killTenantProcesses(used, "killing processes of a tenant uid still running at aiod's stop")
	ts.mu.Lock()
	if ts.release != nil {
		ts.release()
		ts.release = nil
	}
	return nil
}
