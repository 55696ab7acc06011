// Package cluster makes several aiod replicas one service over a NATS
// JetStream system: a directory in a JetStream key-value bucket says which
// replica is each tenant's home (its sessions, terminals, files and
// executions live there), replicas announce themselves in it with
// heartbeats, and a replica that is not the caller's home forwards the
// request to the home (forward.go), the caller's identity signed with the
// cluster's shared secret (guard.ForwardedHeader).
//
// The directory is written with compare-and-set: a tenant without a home,
// or whose home stopped beating for a lease, is placed on the live replica
// with the most room by whichever replica first claims it (Create, or
// Update at the revision it read); the others read the claim. A home holds
// its tenants as long as it beats: its heartbeat renews all of them at once
// (NATS 2.9 has no per-key lifetimes).
package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config is a replica's cluster settings.
type Config struct {
	NATS      string        // --cluster-nats: nats:// URLs, comma-separated
	Advertise string        // --cluster-advertise: HOST:PORT where the other replicas reach this one; also its id
	Lease     time.Duration // --cluster-lease: a replica that has not beaten for this long is gone; DefaultLease
	Bucket    string        // the directory's key-value bucket; DefaultBucket
	Load      func() Load   // this replica's load, read at each heartbeat; nil reports none
	Counter   Counter       // where forwards, placements and handovers are counted; nil counts nothing
	Logger    *slog.Logger
}

// Counter receives the cluster's counts and durations (the daemon's
// stream.Counters: /metrics).
type Counter interface {
	Count(name, label string, n int64)
	Observe(name, label string, v float64)
}

// What the cluster counts (labels joined with stream.LabelSep, "|").
const (
	Forwards        = "cluster_forwards"                 // labels: to (replica id), outcome (answered, unreachable)
	ForwardSeconds  = "cluster_forward_duration_seconds" // labels: to; the home's answer header (a pipe: its setup)
	Placements      = "cluster_placements"               // labels: why (new, moved)
	Handovers       = "cluster_handover_sessions"        // labels: direction (out: handed over at a stop, in: taken in)
	Checkpoints     = "cluster_checkpoints"              // labels: outcome (written, failed)
	CheckpointSecs  = "cluster_checkpoint_duration_seconds"
	TakeInSecs      = "cluster_takein_duration_seconds" // a tenant's checkpoint taken in at its new home
	CheckpointFiles = "cluster_checkpoint_files"        // labels: outcome (written, failed, too_large)
)

func (c *Cluster) count(name, label string) {
	if c.cfg.Counter != nil {
		c.cfg.Counter.Count(name, label, 1)
	}
}

// Count counts n for name and label (the cluster's families), as the
// cluster's own counts go.
func (c *Cluster) Count(name, label string, n int64) {
	if c.cfg.Counter != nil && n > 0 {
		c.cfg.Counter.Count(name, label, n)
	}
}

// Observe records v for name and label (the cluster's histograms).
func (c *Cluster) Observe(name, label string, v float64) {
	if c.cfg.Counter != nil {
		c.cfg.Counter.Observe(name, label, v)
	}
}

// Defaults.
const (
	DefaultLease  = 15 * time.Second
	DefaultBucket = "aiod_cluster"
)

// Load is what a replica reports of its room at each heartbeat.
type Load struct {
	Sessions     int   // live sessions
	MemAvailable int64 // the machine's available memory, bytes
}

// Member is one replica as the directory knows it.
type Member struct {
	ID           string    `json:"id"`
	Address      string    `json:"address"`
	Started      time.Time `json:"started_at"`
	Beat         time.Time `json:"beat_at"` // the replica's clock at its last heartbeat
	Sessions     int       `json:"sessions"`
	MemAvailable int64     `json:"memory_available_bytes"`
}

// MemberView is a member with what this replica makes of it.
type MemberView struct {
	Member
	Alive   bool    `json:"alive"`
	Tenants int     `json:"tenants"`      // tenants the directory homes there
	Seen    float64 `json:"seen_ago_s"`   // seconds since this replica last heard its heartbeat
	Self    bool    `json:"this_replica"` // the replica answering
	Forward int64   `json:"forwarded_to"` // requests this replica forwarded there
}

// placement is a tenant's entry in the directory.
type placement struct {
	Tenant string    `json:"tenant"`
	Home   string    `json:"home"`
	At     time.Time `json:"placed_at"`
}

// Cluster is this replica's view of the cluster.
type Cluster struct {
	cfg Config
	log *slog.Logger
	id  string

	nc *nats.Conn
	kv jetstream.KeyValue

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	done   sync.WaitGroup
	fw     forwarder // forward.go

	mu      sync.Mutex
	members map[string]*seenMember // by id
	homes   map[string]homeEntry   // by directory key

	objMu sync.Mutex            // guards obj
	obj   jetstream.ObjectStore // the checkpoints (checkpoint.go), opened on first use
	adopt adoptions             // tenants taken in here (checkpoint.go)
}

type seenMember struct {
	Member
	seen time.Time // this replica's clock when its entry last changed
}

type homeEntry struct {
	placement
	rev uint64
}

// Start joins the cluster: it connects to NATS, makes the directory's
// bucket when it is not there (three replicas when the system has three
// servers or more), reads it, beats once and keeps beating until Close.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Advertise == "" {
		return nil, errors.New("--cluster-advertise: a replica needs the HOST:PORT the others reach it at")
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger, id: cfg.Advertise, members: map[string]*seenMember{}, homes: map[string]homeEntry{}}
	c.fw.init(c)
	nc, err := nats.Connect(cfg.NATS, nats.Name("aiod "+c.id), nats.Timeout(5*time.Second),
		nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond), nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				c.log.Warn("cluster: NATS connection lost, reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { c.log.Info("cluster: NATS reconnected", "server", nc.ConnectedUrlRedacted()) }))
	if err != nil {
		return nil, fmt.Errorf("--cluster-nats: connect to %s: %w", cfg.NATS, err)
	}
	c.nc = nc
	if err := c.open(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	// The checkpoints' store is made now, while the system is whole: a
	// store of three copies cannot be made with a server missing.
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	_, err = c.objects(octx)
	cancel()
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if err := c.watch(ctx); err != nil {
		c.cancel()
		nc.Close()
		return nil, err
	}
	// A bucket just made may not take writes at once: the first beat is
	// tried again for 15 s.
	bctx, bcancel := context.WithTimeout(ctx, 15*time.Second)
	err = c.beat(bctx)
	for err != nil && pause(bctx, 250*time.Millisecond) {
		err = c.beat(bctx)
	}
	bcancel()
	if err != nil {
		c.cancel()
		c.done.Wait()
		nc.Close()
		return nil, fmt.Errorf("cluster: announce this replica: %w", err)
	}
	c.done.Add(1)
	go c.beating()
	c.log.Info("cluster: joined", "replica", c.id, "nats", nc.ConnectedUrlRedacted(), "bucket", cfg.Bucket, "lease", cfg.Lease)
	return c, nil
}

// open opens the directory's bucket, or makes it when there is none.
func (c *Cluster) open(ctx context.Context) error {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return fmt.Errorf("cluster: JetStream: %w", err)
	}
	kv, err := openOrMake(ctx, c.nc, "the directory bucket "+c.cfg.Bucket,
		func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, c.cfg.Bucket) },
		func(ctx context.Context, replicas int) (jetstream.KeyValue, error) {
			return js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: c.cfg.Bucket, History: 1,
				Replicas: replicas, Description: "aiod replicas and the home of each tenant"})
		})
	c.kv = kv
	return err
}

// openOrMake opens a JetStream bucket (open), or makes it (make, with
// three copies on a system of three servers or more, else one) when it is
// not there; replicas that start together race to make it, and the
// losers open the winner's. Each attempt has 3 s; JetStream may still be
// electing its leaders, so it tries again for 15 s in all.
func openOrMake[T any](ctx context.Context, nc *nats.Conn, what string,
	open func(context.Context) (T, error), make func(context.Context, int) (T, error)) (T, error) {
	replicas := 1
	if len(nc.Servers()) >= 3 {
		replicas = 3
	}
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var zero T
	for {
		actx, acancel := context.WithTimeout(octx, 3*time.Second)
		b, err := open(actx)
		if err != nil {
			b, err = make(actx, replicas)
			if err != nil && replicas > 1 && strings.Contains(err.Error(), "insufficient resources") {
				replicas = 1 // a system of fewer servers than its routes named
			}
		}
		acancel()
		if err == nil {
			return b, nil
		}
		if !pause(octx, 250*time.Millisecond) {
			return zero, fmt.Errorf("cluster: %s: %w (is JetStream on, nats-server -js?)", what, err)
		}
	}
}

// ID is this replica's id (its advertised address).
func (c *Cluster) ID() string { return c.id }

func memberKey(id string) string { return "m." + hex.EncodeToString([]byte(id)) }

// homeKey is a tenant's key in the directory (tenant keys hold characters
// keys may not).
func homeKey(tenant string) string { return "t." + tenantHash(tenant) }

// tenantHash names a tenant in the cluster's keys and object names.
func tenantHash(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(sum[:20])
}

// watch reads the directory and follows it until Close: the first values
// are in when it returns.
// Making the watch's consumer is one JetStream call of 5 s; a loaded
// server can miss it, so it is tried again for 15 s.
func (c *Cluster) watch(ctx context.Context) error {
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	w, err := c.kv.WatchAll(c.ctx)
	for err != nil && pause(wctx, 250*time.Millisecond) {
		c.log.Warn("cluster: read the directory, trying again", "err", err)
		w, err = c.kv.WatchAll(c.ctx)
	}
	wcancel()
	if err != nil {
		return fmt.Errorf("cluster: read the directory: %w", err)
	}
	ready := make(chan struct{})
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		defer func() { _ = w.Stop() }()
		first := true
		for {
			select {
			case <-c.ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					if first {
						first = false
						close(ready)
					}
					continue
				}
				c.apply(e)
			}
		}
	}()
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errors.New("cluster: the directory was not read within 15 s")
	}
}

// apply takes one directory change into the cache.
func (c *Cluster) apply(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := e.Key()
	gone := e.Operation() != jetstream.KeyValuePut
	switch {
	case strings.HasPrefix(key, "m."):
		raw, _ := hex.DecodeString(strings.TrimPrefix(key, "m."))
		id := string(raw)
		if gone {
			delete(c.members, id)
			return
		}
		var m Member
		if json.Unmarshal(e.Value(), &m) != nil {
			return
		}
		// Heard now; an entry older than a lease at the first read is a
		// replica that stopped beating before this one started.
		seen := time.Now()
		if age := time.Since(e.Created()); c.members[id] == nil && age > 0 {
			seen = seen.Add(-age)
		}
		c.members[id] = &seenMember{Member: m, seen: seen}
	case strings.HasPrefix(key, "t."):
		if gone {
			delete(c.homes, key)
			return
		}
		var p placement
		if json.Unmarshal(e.Value(), &p) != nil {
			return
		}
		if old, ok := c.homes[key]; !ok || old.rev < e.Revision() {
			c.homes[key] = homeEntry{placement: p, rev: e.Revision()}
			if p.Home != c.id {
				c.adopt.forget(p.Tenant) // gone elsewhere: taken in again if it comes back
			}
		}
	}
}

// beat writes this replica's entry.
func (c *Cluster) beat(ctx context.Context) error {
	m := Member{ID: c.id, Address: c.cfg.Advertise, Beat: time.Now().UTC()}
	c.mu.Lock()
	if old := c.members[c.id]; old != nil && !old.Started.IsZero() {
		m.Started = old.Started
	}
	c.mu.Unlock()
	if m.Started.IsZero() {
		m.Started = m.Beat
	}
	if c.cfg.Load != nil {
		l := c.cfg.Load()
		m.Sessions, m.MemAvailable = l.Sessions, l.MemAvailable
	}
	b, _ := json.Marshal(m)
	bctx, cancel := context.WithTimeout(ctx, c.cfg.Lease/2)
	defer cancel()
	if _, err := c.kv.Put(bctx, memberKey(c.id), b); err != nil {
		return err
	}
	c.mu.Lock()
	c.members[c.id] = &seenMember{Member: m, seen: time.Now()}
	c.mu.Unlock()
	return nil
}

// beating beats every third of a lease until Close.
func (c *Cluster) beating() {
	defer c.done.Done()
	t := time.NewTicker(c.cfg.Lease / 3)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		err := c.beat(c.ctx)
		switch {
		case err != nil && !failing:
			failing = true
			c.log.Warn("cluster: heartbeat failed; the other replicas take this one's tenants after a lease without one", "err", err, "lease", c.cfg.Lease)
		case err == nil && failing:
			failing = false
			c.log.Info("cluster: heartbeat written again")
		}
	}
}

// aliveLocked says whether replica id has beaten within a lease.
func (c *Cluster) aliveLocked(id string) bool {
	if id == c.id {
		return true
	}
	m := c.members[id]
	return m != nil && time.Since(m.seen) < c.cfg.Lease
}

// ErrNoHome is a tenant no live replica can take.
var ErrNoHome = errors.New("no live aiod replica in the cluster's directory")

// Home is tenant's home replica: the directory's, or, when it has none or
// its home stopped beating, the live replica with the most room, claimed
// for it with compare-and-set.
func (c *Cluster) Home(ctx context.Context, tenant string) (Member, error) {
	key := homeKey(tenant)
	var last error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if last != nil && !pause(ctx, wait) {
			return Member{}, fmt.Errorf("cluster: tenant %q has no home: %w", tenant, last)
		}
		c.mu.Lock()
		h, placed := c.homes[key]
		if placed && c.aliveLocked(h.Home) {
			m := c.members[h.Home]
			c.mu.Unlock()
			if m == nil { // this replica, before its first beat was read back
				return Member{ID: c.id, Address: c.cfg.Advertise}, nil
			}
			return m.Member, nil
		}
		best, ok := c.roomiestLocked()
		c.mu.Unlock()
		if !ok {
			return Member{}, ErrNoHome
		}
		b, _ := json.Marshal(placement{Tenant: tenant, Home: best.ID, At: time.Now().UTC()})
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var rev uint64
		var err error
		if placed {
			rev, err = c.kv.Update(cctx, key, b, h.rev)
		} else {
			rev, err = c.kv.Create(cctx, key, b)
		}
		if err == nil {
			cancel()
			c.mu.Lock()
			if old, ok := c.homes[key]; !ok || old.rev < rev {
				c.homes[key] = homeEntry{placement: placement{Tenant: tenant, Home: best.ID}, rev: rev}
			}
			c.mu.Unlock()
			if placed {
				c.count(Placements, "moved")
				c.log.Warn("cluster: tenant moved from a replica that stopped beating", "tenant", tenant, "from", h.Home, "to", best.ID)
			} else {
				c.count(Placements, "new")
				c.log.Info("cluster: tenant placed", "tenant", tenant, "home", best.ID)
			}
			return best, nil
		}
		// Another replica claimed it first (read its claim), or the
		// directory could not be written now (JetStream electing a leader
		// after a server was lost): try again, with a pause.
		e, gerr := c.kv.Get(cctx, key)
		cancel()
		switch {
		case gerr == nil:
			c.apply(e)
			last = nil
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			c.mu.Lock()
			delete(c.homes, key)
			c.mu.Unlock()
			last = err
		default:
			last = fmt.Errorf("the directory: %w (claiming: %v)", gerr, err)
		}
		if last == nil && errors.Is(err, jetstream.ErrKeyExists) {
			continue // the claim just read answers at once
		}
		if last == nil {
			last = err
		}
	}
}

// pause waits d, or until ctx ends (false).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// roomiestLocked is the live replica with the most room: the fewest
// sessions and tenants, then the most available memory.
func (c *Cluster) roomiestLocked() (Member, bool) {
	tenants := c.tenantsLocked()
	var best *seenMember
	score := func(m *seenMember) int { return m.Sessions + tenants[m.ID] }
	for _, m := range c.members {
		if !c.aliveLocked(m.ID) {
			continue
		}
		if best == nil || score(m) < score(best) ||
			score(m) == score(best) && (m.MemAvailable > best.MemAvailable || m.MemAvailable == best.MemAvailable && m.ID < best.ID) {
			best = m
		}
	}
	if best == nil {
		return Member{}, false
	}
	return best.Member, true
}

func (c *Cluster) tenantsLocked() map[string]int {
	n := map[string]int{}
	for _, h := range c.homes {
		n[h.Home]++
	}
	return n
}

// Members is every replica the directory knows, this one first.
func (c *Cluster) Members() []MemberView {
	c.mu.Lock()
	defer c.mu.Unlock()
	tenants := c.tenantsLocked()
	out := make([]MemberView, 0, len(c.members))
	for id, m := range c.members {
		out = append(out, MemberView{Member: m.Member, Alive: c.aliveLocked(id), Tenants: tenants[id],
			Seen: time.Since(m.seen).Seconds(), Self: id == c.id, Forward: c.fw.count(id)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Self != out[j].Self {
			return out[i].Self
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Moved says, for a request another replica forwarded here as tenant's
// home, where the tenant lives now when that is another live replica (the
// forwarder's view was older than this one's): "" when this replica is
// the home, or the directory names no live one. The directory itself is
// read when this replica's view disagrees (a claim just made by the
// forwarder may not have reached it yet).
func (c *Cluster) Moved(ctx context.Context, tenant string) string {
	key := homeKey(tenant)
	c.mu.Lock()
	h, ok := c.homes[key]
	other := ok && h.Home != c.id && c.aliveLocked(h.Home)
	c.mu.Unlock()
	if !other {
		return ""
	}
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	e, err := c.kv.Get(gctx, key)
	if err != nil {
		return "" // cannot tell: the forwarder's claim stands
	}
	c.apply(e)
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.homes[key]; ok && h.Home != c.id && c.aliveLocked(h.Home) {
		return h.Home
	}
	return ""
}

// HomeOf is tenant's home as the directory says now (no claim): "" when it
// has none or its home is gone.
func (c *Cluster) HomeOf(tenant string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.homes[homeKey(tenant)]; ok && c.aliveLocked(h.Home) {
		return h.Home
	}
	return ""
}

// Close leaves the cluster: it stops beating, removes this replica's entry
// (its tenants are placed again at their next call) and closes the
// forwarded connections and NATS.
func (c *Cluster) Close(ctx context.Context) error {
	c.cancel()
	c.done.Wait()
	c.fw.close()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := c.kv.Delete(dctx, memberKey(c.id))
	c.nc.Close()
	return err
}
