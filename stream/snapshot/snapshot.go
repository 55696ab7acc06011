// Package snapshot saves the state of Python sessions into sealed files in
// aiod's state directory and restores it into fresh runtimes: on demand
// (POST /v2/code/sessions/{id}/snapshot), before an idle session is
// reclaimed and at shutdown (the registry's stream.Snapshots hooks), and
// for a fork.
//
// The kernel serializes its user namespace with dill (save.py, run as an
// internal execution of the session: silent, in the session's order) and
// prints it; aiod writes the file and seals it with an HMAC under a key
// only aiod holds, and before a restore verifies it and sends it back
// (restore.py). A runtime never writes a snapshot file: runtimes do not
// see the state directory.
package snapshot

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/execution"
)

//go:embed save.py
var saveSource string

//go:embed restore.py
var restoreSource string

//go:embed save.js
var saveJS string

//go:embed restore.js
var restoreJS string

//go:embed save.sh
var saveSh string

//go:embed restore.sh
var restoreSh string

// programs is the save and restore code of each language snapshots know.
var programs = map[string]struct{ save, restore string }{
	"python":     {saveSource, restoreSource},
	"javascript": {saveJS, restoreJS},
	"bash":       {saveSh, restoreSh},
}

// Defaults of Config.
const (
	DefaultMaxBytes    = 256 << 20
	DefaultTotalBytes  = 4 << 30
	DefaultTenantBytes = 1 << 30
	DefaultRetention   = 7 * 24 * time.Hour
	DefaultSaveTimeout = 60 * time.Second
	keepPerSession     = 3
	outputMarker       = "\x1eaiod-snapshot "
)

// Why a snapshot was taken.
const (
	WhyRequest  = "request"  // POST .../snapshot
	WhyIdle     = "idle"     // before idle reclaim
	WhyShutdown = "shutdown" // at shutdown
	WhyFork     = "fork"     // for a fork
	// WhyCheckpoint: a replica's checkpoint of a live session, for the
	// cluster's object store; a session keeps only its latest one.
	WhyCheckpoint = "checkpoint"
)

// Config is where snapshots live and what bounds them.
type Config struct {
	Dir         string        // the snapshots' folder (the state directory's "snapshots"); the key sits beside it
	MaxBytes    int64         // one snapshot's payload; DefaultMaxBytes
	TotalBytes  int64         // all snapshots; past it, the oldest of the tenant holding the most go first; DefaultTotalBytes
	TenantBytes int64         // one tenant's snapshots; past it, that tenant's oldest go first; DefaultTenantBytes
	Retention   time.Duration // a snapshot is deleted this long after it was taken; DefaultRetention
	SaveTimeout time.Duration // bound on one save or restore; DefaultSaveTimeout
	// Scratch is the folder session s's runtime shares with aiod, through
	// which Python and JavaScript payloads go (scratch.go); nil (or a nil
	// func) passes them as base64 on the runtime's stdout (a remote
	// kernel's, bash's).
	Scratch func(s *stream.Session) *Scratch
	// Key, when set, seals the snapshots instead of the state directory's
	// own key: replicas of a cluster share one (derived from the cluster's
	// secret), so that a snapshot one writes another can verify and load.
	Key    []byte
	Logger *slog.Logger
}

// Info is one snapshot: the header of its file, and the answer of a save.
type Info struct {
	SnapshotID string            `json:"snapshot_id"`
	Tenant     string            `json:"tenant"`
	Language   string            `json:"language"`
	SessionID  string            `json:"session_id"`
	Created    time.Time         `json:"created_at"`
	Why        string            `json:"why"`
	Bytes      int64             `json:"bytes"` // the payload's
	Saved      []string          `json:"saved"`
	Skipped    map[string]string `json:"skipped"`
	Reopened   map[string]string `json:"reopened,omitempty"`

	path string
	size int64 // the file's
}

// Path is the snapshot's file.
func (i *Info) Path() string { return i.path }

// Key names a session.
type Key struct{ Tenant, Language, ID string }

func keyOf(s *stream.Session) Key { return Key{s.Tenant, s.Language, s.ID} }

type entry struct {
	snaps   []*Info       // oldest first
	pending bool          // the next start restores the latest
	saving  chan struct{} // closed when the saves in progress end; nil when none
	holders int           // saves (and reservations) in progress
	epoch   int           // counts Forget: a save begun before one is dropped
}

// Manager keeps the snapshots: the files, an index of them in memory, and
// the sessions waiting for a restore. It implements stream.Snapshots.
type Manager struct {
	cfg  Config
	key  []byte
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}

	mu    sync.Mutex
	index map[Key]*entry
	bytes int64
	once  sync.Once
}

var _ stream.Snapshots = (*Manager)(nil)

// Open reads the snapshots in cfg.Dir (every session with one waits for a
// restore: they are the sessions saved before aiod stopped) and starts the
// retention sweep; call Close.
func Open(cfg Config) (*Manager, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.TotalBytes <= 0 {
		cfg.TotalBytes = DefaultTotalBytes
	}
	if cfg.TenantBytes <= 0 {
		cfg.TenantBytes = DefaultTenantBytes
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.SaveTimeout <= 0 {
		cfg.SaveTimeout = DefaultSaveTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	key := cfg.Key
	if len(key) == 0 {
		var err error
		if key, err = loadKey(filepath.Dir(cfg.Dir)); err != nil {
			return nil, fmt.Errorf("snapshot key: %w", err)
		}
	}
	m := &Manager{cfg: cfg, key: key, log: cfg.Logger, index: map[Key]*entry{}, stop: make(chan struct{}), done: make(chan struct{})}
	m.scan()
	m.sweep(time.Now())
	go m.sweeper()
	return m, nil
}

// Config is the manager's bounds.
func (m *Manager) Config() Config { return m.cfg }

// scan indexes the files in the folder; one whose header does not verify
// is left alone and logged.
func (m *Manager) scan() {
	paths, _ := filepath.Glob(filepath.Join(m.cfg.Dir, "*", "*", "*"+fileExtension))
	for _, p := range paths {
		info, size, err := readHeader(m.key, p)
		if err != nil {
			m.log.Warn("snapshot refused", "file", p, "err", err)
			continue
		}
		if filepath.Dir(p) != m.sessionDir(Key{info.Tenant, info.Language, info.SessionID}) {
			m.log.Warn("snapshot refused", "file", p, "err", "not in its session's folder")
			continue
		}
		info.path, info.size = p, size
		m.add(Key{info.Tenant, info.Language, info.SessionID}, info, true)
	}
	for _, e := range m.index {
		sort.Slice(e.snaps, func(i, j int) bool { return e.snaps[i].Created.Before(e.snaps[j].Created) })
		// A session waits for a restore when its latest snapshot was taken
		// as its runtime went (idle, shutdown) or for a fork: one taken on
		// request may be older than the state the session had at the end.
		e.pending = e.snaps[len(e.snaps)-1].Why != WhyRequest
	}
}

func (m *Manager) sessionDir(k Key) string {
	return filepath.Join(m.cfg.Dir, dirName(k.Tenant), dirName(k.Language, k.ID))
}

// add indexes a snapshot of k; pending marks k as waiting for a restore.
func (m *Manager) add(k Key, info *Info, pending bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addLocked(k, info, pending)
}

func (m *Manager) addLocked(k Key, info *Info, pending bool) {
	e := m.index[k]
	if e == nil {
		e = &entry{}
		m.index[k] = e
	}
	e.snaps = append(e.snaps, info)
	e.pending = e.pending || pending
	m.bytes += info.size
}

// Save snapshots the session's state (why: one of the Why constants) and
// returns what it holds. The session keeps running.
func (m *Manager) Save(ctx context.Context, s *stream.Session, why string) (*Info, error) {
	return m.save(ctx, s, why, true)
}

// save is Save; reserve is false when the caller holds the name's
// reservation already (Reserve).
func (m *Manager) save(ctx context.Context, s *stream.Session, why string, reserve bool) (*Info, error) {
	prog, ok := programs[s.Language]
	if !ok {
		return nil, &UnsupportedError{Language: s.Language}
	}
	k := keyOf(s)
	if reserve {
		done := m.beginSave(k)
		defer done()
	}
	epoch := m.epochOf(k)
	a := map[string]any{"max_bytes": m.cfg.MaxBytes}
	budget := int(m.cfg.MaxBytes/3*4) + 1<<20
	sc, name := m.scratch(s), ""
	if sc != nil {
		name = scratchName("snapshot")
		a["out"], budget = sc.viewPath(name), 1<<20
		defer sc.remove(name)
	}
	args, _ := json.Marshal(a)
	res, err := s.Internal(ctx, program(s.Language, prog.save, args), m.cfg.SaveTimeout, budget)
	if err != nil {
		return nil, err
	}
	var out struct {
		Error    string            `json:"error"`
		Payload  string            `json:"payload"`
		Bytes    *int64            `json:"bytes"`
		Saved    []string          `json:"saved"`
		Skipped  map[string]string `json:"skipped"`
		Reopened map[string]string `json:"reopened"`
	}
	if err := parseOutput(res, &out); err != nil {
		return nil, err
	}
	if out.Error != "" {
		return nil, errors.New(out.Error)
	}
	if (why == WhyIdle || why == WhyShutdown) && len(out.Saved) == 0 && !namesAny(out.Skipped) {
		return nil, errEmpty // nothing to restore: the next call starts fresh, as it would
	}
	var src io.Reader
	var n int64
	if sc != nil && out.Bytes != nil {
		f, size, err := sc.open(name, m.cfg.MaxBytes)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if size != *out.Bytes {
			return nil, fmt.Errorf("the runtime's snapshot file holds %d bytes, not the %d it wrote", size, *out.Bytes)
		}
		src, n = f, size
	} else {
		payload, err := base64.StdEncoding.DecodeString(out.Payload)
		if err != nil {
			return nil, fmt.Errorf("the kernel's snapshot was not valid base64: %w", err)
		}
		src, n = bytes.NewReader(payload), int64(len(payload))
	}
	now := time.Now()
	info := &Info{SnapshotID: newID(now), Tenant: s.Tenant, Language: s.Language, SessionID: s.ID, Created: now.UTC(),
		Why: why, Bytes: n, Saved: nonNil(out.Saved), Skipped: nonNilMap(out.Skipped), Reopened: out.Reopened}
	if err := m.store(k, info, src, n, why == WhyIdle || why == WhyShutdown, epoch); err != nil {
		return nil, err
	}
	return info, nil
}

// scratch is the folder s's runtime shares with aiod for payloads, when
// its language's programs use one; nil: payloads go inline.
func (m *Manager) scratch(s *stream.Session) *Scratch {
	if m.cfg.Scratch == nil || (s.Language != "python" && s.Language != "javascript") {
		return nil
	}
	return m.cfg.Scratch(s)
}

// epochOf is k's count of Forget calls.
func (m *Manager) epochOf(k Key) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.index[k]; e != nil {
		return e.epoch
	}
	return 0
}

// store writes a snapshot of k, its payload the n bytes of payload, and indexes it, unless k was forgotten
// since epoch (a session deleted while it was being saved).
func (m *Manager) store(k Key, info *Info, payload io.Reader, n int64, pending bool, epoch int) error {
	info.path = filepath.Join(m.sessionDir(k), info.SnapshotID+fileExtension)
	if err := writeFileFrom(m.key, info.path, info, payload, n); err != nil {
		return fmt.Errorf("write the snapshot: %w", err)
	}
	if st, err := os.Stat(info.path); err == nil {
		info.size = st.Size()
	}
	if !m.addIf(k, info, pending, epoch) {
		_ = os.Remove(info.path)
		return errors.New("the session was deleted while it was being saved")
	}
	m.trim(k)
	m.bound(k.Tenant)
	return nil
}

// addIf is add, unless k was forgotten since epoch.
func (m *Manager) addIf(k Key, info *Info, pending bool, epoch int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := 0
	if e := m.index[k]; e != nil {
		cur = e.epoch
	}
	if cur != epoch {
		return false
	}
	m.addLocked(k, info, pending)
	return true
}

// trim keeps the last few snapshots of k, and of its checkpoints only the
// newest, which does not count among the few: a session's checkpoints do
// not push out the snapshots its caller asked for.
func (m *Manager) trim(k Key) {
	m.mu.Lock()
	e := m.index[k]
	var drop []*Info
	if e != nil && len(e.snaps) > 1 && e.snaps[len(e.snaps)-1].Why == WhyCheckpoint {
		last := len(e.snaps) - 1
		kept := make([]*Info, 0, len(e.snaps))
		for i, sn := range e.snaps {
			if sn.Why == WhyCheckpoint && i != last {
				drop = append(drop, sn)
			} else {
				kept = append(kept, sn)
			}
		}
		e.snaps = kept
	}
	keep := keepPerSession
	if e != nil && slices.ContainsFunc(e.snaps, func(sn *Info) bool { return sn.Why == WhyCheckpoint }) {
		keep++
	}
	if e != nil && len(e.snaps) > keep {
		drop = append(drop, e.snaps[:len(e.snaps)-keep]...)
		e.snaps = append([]*Info(nil), e.snaps[len(e.snaps)-keep:]...)
	}
	for _, d := range drop {
		m.bytes -= d.size
	}
	m.mu.Unlock()
	for _, d := range drop {
		_ = os.Remove(d.path)
	}
}

// beginSave marks a save of k in progress (there may be several: saves of
// one session run one at a time in its order anyway); a restore of k
// waits until every one has ended. It never blocks.
func (m *Manager) beginSave(k Key) (done func()) {
	m.mu.Lock()
	e := m.index[k]
	if e == nil {
		e = &entry{}
		m.index[k] = e
	}
	if e.saving == nil {
		e.saving = make(chan struct{})
	}
	e.holders++
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			e.holders--
			if e.holders > 0 {
				return
			}
			close(e.saving)
			e.saving = nil
			if len(e.snaps) == 0 && !e.pending && m.index[k] == e {
				delete(m.index, k)
			}
		})
	}
}

// Reserve is the registry's hook as it takes a session out for idleness
// or at shutdown: a restore of its name waits until release.
func (m *Manager) Reserve(s *stream.Session) (release func()) {
	if _, ok := programs[s.Language]; !ok || s.ID == "" {
		return func() {}
	}
	return m.beginSave(keyOf(s))
}

// SaveBeforeClose is the registry's hook before idle reclaim and shutdown,
// under the reservation Reserve made.
func (m *Manager) SaveBeforeClose(ctx context.Context, s *stream.Session, why string) {
	w := WhyIdle
	if why == stream.ClosedShutdown {
		w = WhyShutdown
	}
	if _, ok := programs[s.Language]; !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.SaveTimeout)
	defer cancel()
	began := time.Now()
	info, err := m.save(ctx, s, w, false)
	if errors.Is(err, errEmpty) {
		// Nothing to restore: older automatic snapshots must not bring
		// back a state the session had since left.
		m.dropAutomatic(keyOf(s))
		m.log.Debug("session not saved: its namespace is empty", "session", s.ID, "language", s.Language, "why", w)
		return
	}
	if err != nil {
		m.log.Warn("session not saved", "session", s.ID, "language", s.Language, "why", w, "err", err)
		return
	}
	m.log.Info("session saved", "session", s.ID, "language", s.Language, "why", w, "snapshot", info.SnapshotID,
		"bytes", info.Bytes, "skipped", len(info.Skipped), "took", time.Since(began).Round(time.Millisecond).String())
}

// dropAutomatic deletes k's snapshots taken at idle, shutdown or for a
// fork (not those taken on request), and k no longer waits for a restore.
func (m *Manager) dropAutomatic(k Key) {
	m.mu.Lock()
	e := m.index[k]
	var drop []*Info
	if e != nil {
		keep := e.snaps[:0:0]
		for _, i := range e.snaps {
			if i.Why == WhyRequest {
				keep = append(keep, i)
			} else {
				drop = append(drop, i)
				m.bytes -= i.size
			}
		}
		e.snaps, e.pending = keep, false
	}
	m.mu.Unlock()
	for _, i := range drop {
		_ = os.Remove(i.path)
	}
}

// AwaitSaves waits, within ctx, until no save of k is in progress: a
// session reclaimed for idleness has left the registry before its save is
// stored, and its name is reserved until then (Reserve).
func (m *Manager) AwaitSaves(ctx context.Context, k Key) {
	m.mu.Lock()
	var saving chan struct{}
	if e := m.index[k]; e != nil {
		saving = e.saving
	}
	m.mu.Unlock()
	if saving != nil {
		select {
		case <-saving:
		case <-ctx.Done():
		}
	}
}

// Restore is the registry's hook after a named session started a fresh
// runtime: when the session waits for a restore, its latest snapshot is
// verified and loaded.
func (m *Manager) Restore(ctx context.Context, s *stream.Session, run stream.InternalRun) (waiting, restored bool, skipped map[string]string, note string) {
	k := keyOf(s)
	m.AwaitSaves(ctx, k) // the session is being saved as it is reclaimed: wait
	m.mu.Lock()
	e := m.index[k]
	if e == nil || !e.pending || len(e.snaps) == 0 {
		m.mu.Unlock()
		return false, false, nil, ""
	}
	e.pending = false
	info := e.snaps[len(e.snaps)-1]
	m.mu.Unlock()
	skipped, err := m.load(ctx, k, info, run, s.Backend.Name != "native", m.scratch(s))
	if err != nil {
		m.log.Warn("session not restored", "session", s.ID, "language", s.Language, "snapshot", info.SnapshotID, "err", err)
		return true, false, nil, fmt.Sprintf("its saved state (snapshot %s) could not be restored: %v", info.SnapshotID, err)
	}
	return true, true, skipped, fmt.Sprintf("the session's state was restored from snapshot %s (saved %s, at %s)",
		info.SnapshotID, whyWords(info.Why), info.Created.UTC().Format(time.RFC3339))
}

// load verifies the snapshot's file and loads it with run; skipped is
// what the snapshot did not hold and what could not be restored.
func (m *Manager) load(ctx context.Context, k Key, info *Info, run stream.InternalRun, kernel bool, sc *Scratch) (map[string]string, error) {
	var full *Info
	var a map[string]any
	if sc != nil {
		// Verified while it is copied; removed before anything reads it
		// when it does not verify, and after the restore in any case.
		name := scratchName("restore")
		f, err := sc.create(name)
		if err != nil {
			return nil, err
		}
		defer sc.remove(name)
		full, err = copyPayload(m.key, info.path, m.cfg.MaxBytes, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		a = map[string]any{"path": sc.viewPath(name)}
	} else {
		var payload []byte
		var err error
		if full, payload, err = readFile(m.key, info.path, m.cfg.MaxBytes); err != nil {
			return nil, err
		}
		a = map[string]any{"payload": base64.StdEncoding.EncodeToString(payload)}
	}
	if full.Tenant != k.Tenant || full.Language != k.Language || full.SessionID != k.ID {
		return nil, ErrTampered // a sealed file of another session, moved
	}
	args, _ := json.Marshal(a)
	a = nil
	var err error
	prog := program(k.Language, programs[k.Language].restore, args)
	var res *execution.Result
	if kernel && k.Language == "python" {
		// A kernel hashes every cell's text (ipykernel's debugger names
		// cells), in pure Python: a 3 MB cell costs half a second. A user
		// expression is a plain eval.
		res, err = run(ctx, "", prog, m.cfg.SaveTimeout, 1<<20)
	} else {
		res, err = run(ctx, prog, "", m.cfg.SaveTimeout, 1<<20)
	}
	if err != nil {
		return nil, err
	}
	var out struct {
		Error    string            `json:"error"`
		Restored []string          `json:"restored"`
		Skipped  map[string]string `json:"skipped"`
	}
	if err := parseOutput(res, &out); err != nil {
		return nil, err
	}
	if out.Error != "" {
		return nil, errors.New(out.Error)
	}
	skipped := map[string]string{}
	for n, why := range full.Skipped {
		skipped[n] = "not saved: " + why
	}
	for n, why := range out.Skipped {
		skipped[n] = why
	}
	return skipped, nil
}

// Forget deletes the snapshots of tenant's session id (lang "": every
// language) and says how many sessions had some.
func (m *Manager) Forget(tenant, lang, id string) int {
	m.mu.Lock()
	var gone []*Info
	n := 0
	for k, e := range m.index {
		if k.Tenant != tenant || k.ID != id || (lang != "" && k.Language != lang) {
			continue
		}
		if len(e.snaps) > 0 {
			n++
		}
		for _, i := range e.snaps {
			m.bytes -= i.size
		}
		gone = append(gone, e.snaps...)
		e.snaps, e.pending = nil, false
		e.epoch++
		if e.saving == nil {
			delete(m.index, k)
		}
	}
	m.mu.Unlock()
	for _, i := range gone {
		_ = os.Remove(i.path)
	}
	return n
}

// Saved lists tenant's sessions that wait for a restore (their state is
// saved and no runtime holds it), with their latest snapshot.
func (m *Manager) Saved(tenant string) []*Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Info
	for k, e := range m.index {
		if k.Tenant == tenant && e.pending && len(e.snaps) > 0 {
			out = append(out, e.snaps[len(e.snaps)-1])
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].SessionID != out[j].SessionID {
			return out[i].SessionID < out[j].SessionID
		}
		return out[i].Language < out[j].Language
	})
	return out
}

// Latest is the newest snapshot of k, and whether k waits for a restore.
func (m *Manager) Latest(k Key) (info *Info, pending bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.index[k]
	if e == nil || len(e.snaps) == 0 {
		return nil, false
	}
	return e.snaps[len(e.snaps)-1], e.pending
}

// Fork makes session to wait for a restore of from's snapshot: a link to
// its file under to's name, resealed (its header names to).
func (m *Manager) Fork(from *Info, to Key) (*Info, error) {
	full, payload, err := readFile(m.key, from.path, m.cfg.MaxBytes)
	if err != nil {
		return nil, err
	}
	if full.Tenant != to.Tenant {
		return nil, ErrTampered
	}
	now := time.Now()
	info := *full
	info.SnapshotID, info.Language, info.SessionID, info.Created, info.Why = newID(now), to.Language, to.ID, now.UTC(), WhyFork
	// The payload is held once here (a fork is rare); saves and restores
	// stream theirs.
	if err := m.store(to, &info, bytes.NewReader(payload), int64(len(payload)), true, m.epochOf(to)); err != nil {
		return nil, err
	}
	return &info, nil
}

// Pending says whether k waits for a restore.
func (m *Manager) Pending(k Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.index[k]
	return e != nil && e.pending && len(e.snaps) > 0
}

// Stats is what the snapshots hold.
type Stats struct {
	Sessions, Snapshots, Waiting int
	Bytes                        int64
}

// Stats reports the snapshots' totals.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Stats{Bytes: m.bytes}
	for _, e := range m.index {
		if len(e.snaps) > 0 {
			st.Sessions++
		}
		st.Snapshots += len(e.snaps)
		if e.pending && len(e.snaps) > 0 {
			st.Waiting++
		}
	}
	return st
}

func (m *Manager) sweeper() {
	defer close(m.done)
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			m.sweep(now)
		}
	}
}

// sweep deletes the snapshots past the retention, then bounds the bytes.
func (m *Manager) sweep(now time.Time) {
	m.mu.Lock()
	var drop []*Info
	for k, e := range m.index {
		for _, i := range append([]*Info(nil), e.snaps...) {
			if now.Sub(i.Created) > m.cfg.Retention {
				m.dropLocked(k, i)
				drop = append(drop, i)
			}
		}
	}
	drop = append(drop, m.boundLocked("")...)
	m.mu.Unlock()
	for _, d := range drop {
		_ = os.Remove(d.path)
	}
}

// bound deletes tenant's oldest snapshots while it holds more than
// TenantBytes, then, while all hold more than TotalBytes, the oldest of
// the tenant holding the most: one tenant's saves never push another's
// out while it holds more than that other.
func (m *Manager) bound(tenant string) {
	m.mu.Lock()
	drop := m.boundLocked(tenant)
	m.mu.Unlock()
	for _, d := range drop {
		_ = os.Remove(d.path)
	}
}

func (m *Manager) boundLocked(tenant string) []*Info {
	type held struct {
		bytes int64
		snaps []*Info // oldest first
		keys  map[*Info]Key
	}
	tenants := map[string]*held{}
	for k, e := range m.index {
		h := tenants[k.Tenant]
		if h == nil {
			h = &held{keys: map[*Info]Key{}}
			tenants[k.Tenant] = h
		}
		for _, i := range e.snaps {
			h.bytes += i.size
			h.snaps = append(h.snaps, i)
			h.keys[i] = k
		}
	}
	for _, h := range tenants {
		sort.Slice(h.snaps, func(a, b int) bool { return h.snaps[a].Created.Before(h.snaps[b].Created) })
	}
	var drop []*Info
	pop := func(h *held) {
		i := h.snaps[0]
		h.snaps = h.snaps[1:]
		h.bytes -= i.size
		m.dropLocked(h.keys[i], i)
		drop = append(drop, i)
	}
	if h := tenants[tenant]; h != nil {
		for h.bytes > m.cfg.TenantBytes && len(h.snaps) > 0 {
			pop(h)
		}
	}
	for m.bytes > m.cfg.TotalBytes {
		var most *held
		for _, h := range tenants {
			if len(h.snaps) > 0 && (most == nil || h.bytes > most.bytes) {
				most = h
			}
		}
		if most == nil {
			break
		}
		pop(most)
	}
	return drop
}

// dropLocked forgets snapshot d of k (its file is the caller's to remove).
func (m *Manager) dropLocked(k Key, d *Info) {
	e := m.index[k]
	if e == nil {
		return
	}
	for j, i := range e.snaps {
		if i == d {
			e.snaps = append(e.snaps[:j:j], e.snaps[j+1:]...)
			m.bytes -= d.size
			break
		}
	}
	if len(e.snaps) == 0 && e.saving == nil {
		delete(m.index, k)
	}
}

// Close stops the retention sweep.
func (m *Manager) Close() {
	m.once.Do(func() {
		close(m.stop)
		<-m.done
	})
}

// namesAny says whether skipped names a value (not only a general note,
// whose key is in parentheses).
func namesAny(skipped map[string]string) bool {
	for k := range skipped {
		if !strings.HasPrefix(k, "(") {
			return true
		}
	}
	return false
}

// errEmpty says that a session's namespace held nothing to save.
var errEmpty = errors.New("the namespace is empty")

// UnsupportedError says a language's sessions cannot be snapshotted.
type UnsupportedError struct{ Language string }

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("snapshots of %s sessions are not supported; python, javascript and bash sessions are", e.Language)
}

// program is the code that runs src with args in the session's namespace
// and adds nothing to it.
func program(lang, src string, args []byte) string {
	a, _ := json.Marshal(string(args))
	switch lang {
	case "javascript":
		return fmt.Sprintf("(() => { const args = JSON.parse(%s);\n%s\n})()", a, src)
	case "bash":
		// args is JSON of numbers and base64 only: no quote to escape.
		return fmt.Sprintf("__aiod_args='%s'\n%s", args, src)
	}
	s, _ := json.Marshal(src)
	return fmt.Sprintf("exec(compile(%s, '<aiod-snapshot>', 'exec'), {'__aiod_user': globals(), '__aiod_args': %s, '__name__': '__aiod__'})", s, a)
}

// parseOutput reads the marked line of an internal execution's stdout.
func parseOutput(res *execution.Result, v any) error {
	if res.Status != execution.StatusOK {
		return fmt.Errorf("the kernel could not run it: %s", res.Message())
	}
	text := res.Text("stdout")
	i := strings.LastIndex(text, outputMarker)
	if i < 0 {
		return fmt.Errorf("the kernel gave no answer (stdout %.200q, stderr %.200q)", text, res.Text("stderr"))
	}
	line := text[i+len(outputMarker):]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	if err := json.Unmarshal([]byte(line), v); err != nil {
		return fmt.Errorf("the kernel's answer did not parse: %w", err)
	}
	return nil
}

func whyWords(why string) string {
	switch why {
	case WhyIdle:
		return "before the idle session was reclaimed"
	case WhyShutdown:
		return "when aiod stopped"
	case WhyFork:
		return "as a fork"
	}
	return "on request"
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
