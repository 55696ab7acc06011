package execution

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccy/go-json"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// The execution store's write-through to the state directory: one bbolt
// file (executions.db), written by one goroutine in batches. It holds
//
//	x    ended (8 bytes, big-endian Unix ns) + seq (8) -> tenant, id, the record (JSON)
//	id   tenant \0 id -> the x key
//	run  tenant \0 id -> a record not finished yet (claimed: queued or running)
//	meta "bytes" -> what x's values hold in all
//
// x is in the order executions finished, so that retention deletes from its
// start and writes append at its end: the pages a busy store touches are
// its last ones, not all of them. A record of run that is still there when
// the file is opened was running when aiod stopped: it becomes a finished
// execution whose error_kind is daemon_restarted.

var (
	bucketX    = []byte("x")
	bucketID   = []byte("id")
	bucketRun  = []byte("run")
	bucketMeta = []byte("meta")
	keyBytes   = []byte("bytes")
)

// DefaultCacheBytes is what finished executions keep in memory when the
// store writes through to disk (Config.Path): the most recent ones.
const DefaultCacheBytes = 16 << 20

// flushEvery is how often the writer commits what finished meanwhile.
const flushEvery = 50 * time.Millisecond

// claimAfter is how long an execution runs before its claim is written to
// the run bucket (where a restart finds it and answers daemon_restarted).
// Most executions end well before it, and writing their claims only to
// delete them at the next commit was a tenth of the store's work under
// load; a stop writes every claim still queued, so only a crash within an
// execution's first second forgets it.
const claimAfter = time.Second

// txBytes is how many bytes of finished records one transaction takes
// before the rest of the queue waits for the next, which follows at once:
// a record is held twice until its transaction commits (encoded, and in
// bbolt's pages), so four 8 MiB results finishing together cost 16 MiB at
// a time rather than 64.
const txBytes = 4 << 20

// dropEvery is how often the file's pages are taken out of aiod's
// resident memory (dropPages).
const dropEvery = time.Second

// dropPages tells the kernel that aiod no longer needs the pages of the
// file it has read through bbolt's memory map: they stay in the page
// cache, but leave aiod's resident set, which would otherwise grow with
// every page a lookup or a write touched, up to the file's size. It runs
// in a read transaction, during which bbolt cannot remap the file.
func (d *disk) dropPages() {
	_ = d.db.View(func(tx *bolt.Tx) error {
		info := d.db.Info()
		if info == nil || info.Data == 0 || tx.Size() <= 0 {
			return nil
		}
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, info.Data, uintptr(tx.Size()), unix.MADV_DONTNEED)
		return nil
	})
}

// StoredError is why an execution could not run, as read back from disk:
// its message only.
type StoredError struct{ Msg string }

func (e *StoredError) Error() string { return e.Msg }

type diskOp struct {
	rec     *Record
	pending bool // a claim (the run bucket), else a finished record
}

type disk struct {
	db   *bolt.DB
	path string

	mu    sync.Mutex
	queue []diskOp
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	bytes atomic.Int64 // held by x's values
	count atomic.Int64 // x's records
	seq   uint64       // the writer's

	closeOnce sync.Once
}

// diskRec is a record on disk.
type diskRec struct {
	State     string      `json:"state,omitempty"`
	Language  string      `json:"l"`
	SessionID string      `json:"s,omitempty"`
	Code      string      `json:"c"`
	Created   time.Time   `json:"cr"`
	Started   time.Time   `json:"st,omitzero"`
	Ended     time.Time   `json:"en,omitzero"`
	Queued    int64       `json:"q,omitempty"`
	LastSeq   int         `json:"ls,omitempty"`
	Result    *diskResult `json:"r,omitempty"`
	Err       string      `json:"e,omitempty"`
}

// diskResult is a Result with its outputs in a form that keeps what is
// not exported.
type diskResult struct {
	Result
	Outputs []diskOutput
}

type diskOutput struct {
	Output
	Page    bool `json:",omitempty"`
	TextLen int  `json:",omitempty"` // its Text is in the value's texts (recTexts)
}

func toDiskResult(r *Result) *diskResult {
	d := &diskResult{Result: *r, Outputs: make([]diskOutput, len(r.Outputs))}
	d.Result.Outputs = nil
	for i, o := range r.Outputs {
		d.Outputs[i] = diskOutput{Output: *o, Page: o.page}
		d.Outputs[i].Output.textJSON, d.Outputs[i].Output.text = nil, nil
		if o.textJSON != nil && o.Text == "" {
			d.Outputs[i].Output.Text = o.StreamText()
		}
	}
	return d
}

// result is the Result d holds; texts are the value's (recTexts), from
// which outputs with a TextLen take their text in order.
func (d *diskResult) result(texts []byte) (*Result, error) {
	r := d.Result
	r.Outputs = make([]*Output, len(d.Outputs))
	for i := range d.Outputs {
		o := d.Outputs[i].Output
		o.page = d.Outputs[i].Page
		if n := d.Outputs[i].TextLen; n > 0 {
			if n > len(texts) {
				return nil, errors.New("bad record: its texts are short")
			}
			o.Text, texts = string(texts[:n]), texts[n:]
		}
		r.Outputs[i] = &o
	}
	return &r, nil
}

// jsonOf is the JSON of a value's rest (nil when it is malformed).
func jsonOf(rest []byte) []byte {
	_, js, _ := splitBody(rest)
	return js
}

// recTexts, right after a value's head, says that the stream texts of its
// result come next, raw: a uvarint of their length, the texts, then the
// record's JSON, whose outputs give each its TextLen. A value whose head
// is followed by '{' is JSON only (written before, or for Shared).
// Encoded this way, an 8 MiB answer is copied once into the value, where
// escaping it inside the JSON took two more buffers of its size.
const recTexts = 0x01

// splitBody returns the texts and the JSON of a value's rest.
func splitBody(rest []byte) (texts, js []byte, err error) {
	if len(rest) == 0 || rest[0] != recTexts {
		return nil, rest, nil
	}
	n, k := binary.Uvarint(rest[1:])
	if k <= 0 || uint64(len(rest)-1-k) < n {
		return nil, nil, errors.New("bad record")
	}
	rest = rest[1+k:]
	return rest[:n], rest[n:], nil
}

func idKey(tenant, id string) []byte {
	k := make([]byte, 0, len(tenant)+1+len(id))
	k = append(k, tenant...)
	k = append(k, 0)
	return append(k, id...)
}

// encodeRec encodes r as a value; split puts its stream texts out of its
// JSON (recTexts).
func encodeRec(r *Record, split bool) ([]byte, error) {
	r.mu.Lock()
	d := diskRec{State: r.state, Language: r.key.Language, SessionID: r.key.SessionID, Code: r.key.Code, Created: r.Created,
		Started: r.started, Ended: r.ended, Queued: int64(r.queued), LastSeq: r.lastSeq}
	if r.result != nil {
		d.Result = toDiskResult(r.result)
	}
	if r.runErr != nil {
		d.Err = r.runErr.Error()
	}
	size := 1024 + len(r.key.Code) + r.resultLen
	r.mu.Unlock()
	var texts []string
	textLen := 0
	if split && d.Result != nil {
		for i := range d.Result.Outputs {
			if o := &d.Result.Outputs[i]; o.Text != "" {
				texts = append(texts, o.Text)
				o.TextLen, o.Text = len(o.Text), ""
				textLen += o.TextLen
			}
		}
	}
	// One buffer, sized for the value (escapes add a sixteenth); the JSON
	// is encoded straight into it.
	b := bytes.NewBuffer(appendHead(make([]byte, 0, size+size/16+len(r.Tenant)+len(r.ID)+3*binary.MaxVarintLen64), r.Tenant, r.ID))
	if split {
		b.WriteByte(recTexts)
		b.Write(binary.AppendUvarint(nil, uint64(textLen)))
		for _, t := range texts {
			b.WriteString(t)
		}
	}
	if err := json.NewEncoder(b).Encode(d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// decodeHead reads the tenant and id a value starts with, and returns the
// rest.
func decodeHead(v []byte) (tenant, id string, rest []byte, err error) {
	t, i, rest, err := splitHead(v)
	return string(t), string(i), rest, err
}

// splitHead is decodeHead without copies: views into v.
func splitHead(v []byte) (tenant, id, rest []byte, err error) {
	n, k := binary.Uvarint(v)
	if k <= 0 || uint64(len(v)-k) < n {
		return nil, nil, nil, errors.New("bad record")
	}
	tenant, v = v[k:k+int(n)], v[k+int(n):]
	n, k = binary.Uvarint(v)
	if k <= 0 || uint64(len(v)-k) < n {
		return nil, nil, nil, errors.New("bad record")
	}
	return tenant, v[k : k+int(n)], v[k+int(n):], nil
}

func (x *Store) decodeRec(v []byte) (*Record, error) {
	tenant, id, rest, err := decodeHead(v)
	if err != nil {
		return nil, err
	}
	texts, body, err := splitBody(rest)
	if err != nil {
		return nil, err
	}
	var d diskRec
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, err
	}
	r := &Record{ID: id, Tenant: tenant, Created: d.Created, x: x, state: StateDone,
		key:  Key{Language: d.Language, SessionID: d.SessionID, Code: d.Code},
		done: make(chan struct{}), cancel: make(chan struct{}), sinks: map[*follower]struct{}{}, firstSeq: 1,
		started: d.Started, ended: d.Ended, queued: time.Duration(d.Queued), lastSeq: d.LastSeq}
	close(r.done)
	r.loaded = true
	r.persisted.Store(true)
	if d.Result != nil {
		if r.result, err = d.Result.result(texts); err != nil {
			return nil, err
		}
		r.resultLen = resultSize(r.result)
	}
	if d.Err != "" {
		r.runErr = &StoredError{Msg: d.Err}
	}
	if r.result == nil && r.runErr == nil {
		r.runErr = &StoredError{Msg: "the execution's record was incomplete"}
	}
	return r, nil
}

// OpenStore returns a store that writes through to cfg.Path (a bbolt
// file, created 0600) when it is set, else NewStore's. Close it.
func OpenStore(cfg Config) (*Store, error) {
	x := NewStore(cfg)
	if cfg.Path == "" {
		return x, nil
	}
	if x.cfg.CacheBytes <= 0 {
		x.cfg.CacheBytes = min(DefaultCacheBytes, x.cfg.RetentionBytes)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o700); err != nil {
		return nil, err
	}
	// The map is sized for the retention from the start: each time bbolt
	// grows it, it first copies every key and value of the transaction
	// into Go's heap (a 27 MB peak for four 8 MiB results). It is address
	// space, not memory: dropPages keeps the file's pages out of the
	// resident set.
	db, err := bolt.Open(cfg.Path, 0o600, &bolt.Options{Timeout: 5 * time.Second, NoFreelistSync: true,
		FreelistType: bolt.FreelistMapType, InitialMmapSize: mmapSize(x.cfg.RetentionBytes)})
	if err != nil {
		return nil, fmt.Errorf("open the execution store %s: %w", cfg.Path, err)
	}
	// Every commit is written but not synced one by one: a crash of aiod
	// loses nothing the kernel's page cache holds; Close syncs.
	db.NoSync = true
	d := &disk{db: db, path: cfg.Path, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	x.disk = d
	if err := x.recover(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("read the execution store %s: %w", cfg.Path, err)
	}
	go x.writer()
	return x, nil
}

// mmapSize is the store's initial memory map: twice the retention (the
// freelist's slack), within [64 MiB, 4 GiB].
func mmapSize(retention int) int {
	return min(max(2*retention, 64<<20), 4<<30)
}

// recover makes the buckets, reads the totals and turns every execution
// that was running when aiod stopped into a finished one.
func (x *Store) recover() error {
	now := time.Now()
	return x.disk.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketX, bucketID, bucketRun, bucketMeta, bucketChunks} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyBytes); len(v) == 8 {
			x.disk.bytes.Store(int64(binary.BigEndian.Uint64(v)))
		}
		x.disk.count.Store(int64(tx.Bucket(bucketX).Stats().KeyN))
		x.disk.seq = tx.Bucket(bucketX).Sequence()
		run := tx.Bucket(bucketRun)
		var stale [][]byte
		var recs []*Record
		err := run.ForEach(func(k, v []byte) error {
			stale = append(stale, append([]byte(nil), k...))
			r, err := x.decodeRec(v)
			if err != nil {
				return nil // an unreadable claim is dropped
			}
			was := StateQueued
			var dr diskRec
			if _, _, rest, err := decodeHead(v); err == nil && json.Unmarshal(jsonOf(rest), &dr) == nil && dr.State != "" {
				was = dr.State
			}
			r.runErr = nil
			r.result = &Result{ExecutionID: r.ID, Code: r.key.Code, Language: r.key.Language, SessionID: r.key.SessionID,
				Status: StatusError, ErrorKind: KindDaemonRestarted,
				Notes: []string{fmt.Sprintf("aiod stopped while this execution was %s; it did not finish, and its outputs are lost", was)}}
			r.ended = now
			recs = append(recs, r)
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range stale {
			if err := run.Delete(k); err != nil {
				return err
			}
		}
		var delta totals
		for _, r := range recs {
			if _, err := x.disk.putDone(tx, r, &delta); err != nil {
				return err
			}
		}
		if err := x.disk.saveMeta(tx, delta); err != nil {
			return err
		}
		x.disk.add(delta)
		return nil
	})
}

// saveMeta writes the disk's bytes, with what tx adds to them.
func (d *disk) saveMeta(tx *bolt.Tx, delta totals) error {
	return tx.Bucket(bucketMeta).Put(keyBytes, binary.BigEndian.AppendUint64(nil, uint64(d.bytes.Load()+delta.bytes)))
}

// add applies a committed transaction's totals.
func (d *disk) add(delta totals) {
	d.bytes.Add(delta.bytes)
	d.count.Add(delta.count)
}

// putDone writes r's finished record in tx and returns its size; what it
// adds to the disk's totals goes into delta, applied once tx commits.
func (d *disk) putDone(tx *bolt.Tx, r *Record, delta *totals) (int, error) {
	v, err := encodeRec(r, true)
	if err != nil {
		return 0, err
	}
	xb, ib := tx.Bucket(bucketX), tx.Bucket(bucketID)
	ik := idKey(r.Tenant, r.ID)
	if old := ib.Get(ik); old != nil { // written before (a replayed claim): replace
		if ov := xb.Get(old); ov != nil {
			delta.bytes -= int64(valueLen(ov))
			delta.count--
			if err := deleteChunks(tx, old, ov); err != nil {
				return len(v), err
			}
		}
		if err := xb.Delete(old); err != nil {
			return len(v), err
		}
	}
	d.seq++
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, uint64(r.endedAt().UnixNano()))
	binary.BigEndian.PutUint64(k[8:], d.seq)
	if err := xb.SetSequence(d.seq); err != nil {
		return len(v), err
	}
	if err := putValue(tx, k, v, r.Tenant, r.ID); err != nil {
		return len(v), err
	}
	if err := ib.Put(ik, k); err != nil {
		return len(v), err
	}
	// Its claim, if one was written (in this transaction too), is
	// replaced by the finished record.
	if err := tx.Bucket(bucketRun).Delete(ik); err != nil {
		return len(v), err
	}
	delta.bytes += int64(len(v))
	delta.count++
	return len(v), nil
}

// totals is what a transaction adds to the disk's bytes and records.
type totals struct{ bytes, count int64 }

func (d *disk) enqueue(op diskOp) {
	d.mu.Lock()
	d.queue = append(d.queue, op)
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// writer commits the queue every flushEvery and applies retention on disk,
// until Close.
func (x *Store) writer() {
	d := x.disk
	defer close(d.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	lastSweep, lastDrop := time.Now(), time.Now()
	for {
		select {
		case <-d.stop:
			x.flush(true)
			return
		case <-t.C:
		case <-d.kick:
			select { // gather a batch
			case <-d.stop:
				x.flush(true)
				return
			case <-t.C:
			}
		}
		x.flush(false)
		if time.Since(lastSweep) > time.Second {
			lastSweep = time.Now()
			x.sweepDisk(lastSweep)
		}
		if time.Since(lastDrop) > dropEvery {
			lastDrop = time.Now()
			d.dropPages()
		}
	}
}

// flush writes what is queued, in transactions of txBytes. Claims younger
// than claimAfter wait for a later flush, unless final (the store is
// closing).
func (x *Store) flush(final bool) {
	for x.flushTx(final) {
	}
}

// flushTx writes what is queued in one transaction, up to txBytes of
// finished records, and says whether more of the queue is to be written
// now.
func (x *Store) flushTx(final bool) (more bool) {
	d := x.disk
	d.mu.Lock()
	q := d.queue
	d.queue = nil
	d.mu.Unlock()
	if len(q) == 0 {
		return
	}
	var written []*Record
	var held, tried, rest []diskOp
	var claimed []*Record
	var delta totals
	now := time.Now()
	err := d.db.Update(func(tx *bolt.Tx) error {
		written, held, tried, rest, claimed, delta = nil, nil, nil, nil, nil, totals{}
		run := tx.Bucket(bucketRun)
		size := 0 // bytes put in this transaction
		for i, op := range q {
			if size >= txBytes {
				rest = q[i:] // the next transaction's, at once
				break
			}
			if op.rec.evicted.Load() {
				continue // memory's bound forgot it before the disk took it
			}
			if op.pending {
				op.rec.mu.Lock()
				done := op.rec.state == StateDone
				op.rec.mu.Unlock()
				if done { // its finished record follows in the queue
					continue
				}
				if !final && now.Sub(op.rec.Created) < claimAfter {
					held = append(held, op)
					continue
				}
				v, err := encodeRec(op.rec, true)
				if err != nil {
					continue
				}
				tried = append(tried, op)
				if err := run.Put(idKey(op.rec.Tenant, op.rec.ID), v); err != nil {
					return err
				}
				size += len(v)
				claimed = append(claimed, op.rec)
				continue
			}
			tried = append(tried, op)
			n, err := d.putDone(tx, op.rec, &delta)
			size += n
			if err != nil {
				if errors.Is(err, bolt.ErrTxClosed) || errors.Is(err, bolt.ErrDatabaseNotOpen) {
					return err
				}
				continue // one that cannot be encoded stays in memory only
			}
			written = append(written, op.rec)
		}
		return d.saveMeta(tx, delta)
	})
	if err != nil {
		// Nothing of the batch was written (a full disk, an I/O error):
		// it waits for the next flush, in its order; memory keeps the
		// records meanwhile, within the retention's bytes.
		x.storeError(fmt.Errorf("write %d executions to %s: %w", len(tried), d.path, err))
		held = append(tried, held...)
	}
	if len(held) > 0 || len(rest) > 0 {
		d.mu.Lock()
		d.queue = append(append(held, rest...), d.queue...)
		d.mu.Unlock()
	}
	if err != nil {
		return
	}
	d.add(delta)
	for _, r := range claimed {
		r.claimed.Store(true)
	}
	for _, r := range written {
		r.persisted.Store(true)
	}
	if len(written) > 0 {
		// What is on disk may leave the cache now, not at the next sweep.
		x.Sweep(time.Now())
	}
	return len(rest) > 0
}

// Errors is how many writes to the store's file failed.
func (x *Store) Errors() int64 { return x.errors.Load() }

func (x *Store) storeError(err error) {
	x.errors.Add(1)
	if x.cfg.OnError != nil {
		x.cfg.OnError(err)
	}
}

// sweepDisk deletes what is past the retention, or over the bytes, from
// disk, oldest first, and leaves tombstones for them.
func (x *Store) sweepDisk(now time.Time) {
	d := x.disk
	if d.bytes.Load() <= int64(x.cfg.RetentionBytes) {
		// Only the time can evict: look at the first key before writing.
		stale := false
		_ = d.db.View(func(tx *bolt.Tx) error {
			k, _ := tx.Bucket(bucketX).Cursor().First()
			stale = k != nil && now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(k)))) > x.cfg.Retention
			return nil
		})
		if !stale {
			return
		}
	}
	type gone struct {
		ek  execKey
		why string
	}
	var evicted []gone
	var delta totals
	err := d.db.Update(func(tx *bolt.Tx) error {
		evicted, delta = nil, totals{}
		xb, ib := tx.Bucket(bucketX), tx.Bucket(bucketID)
		c := xb.Cursor()
		for k, v := c.First(); k != nil && len(evicted) < 10000; k, v = c.First() {
			var why string
			switch {
			case now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(k)))) > x.cfg.Retention:
				why = x.whyAge
			case d.bytes.Load()+delta.bytes > int64(x.cfg.RetentionBytes):
				why = x.whyBytes
			default:
				return d.saveMeta(tx, delta)
			}
			tenant, id, _, err := decodeHead(v)
			delta.bytes -= int64(valueLen(v))
			delta.count--
			if err := deleteChunks(tx, append([]byte(nil), k...), v); err != nil {
				return err
			}
			if err := c.Delete(); err != nil { // another bucket's deletes leave c where it was
				return err
			}
			if err == nil {
				ik := idKey(tenant, id)
				if cur := ib.Get(ik); bytes.Equal(cur, k) {
					_ = ib.Delete(ik)
				}
				evicted = append(evicted, gone{execKey{tenant, id}, why})
			}
		}
		return d.saveMeta(tx, delta)
	})
	if err != nil {
		x.storeError(fmt.Errorf("apply the retention to %s: %w", d.path, err))
		return
	}
	d.add(delta)
	if len(evicted) == 0 {
		return
	}
	x.mu.Lock()
	for _, g := range evicted {
		if r := x.byID[g.ek]; r != nil {
			r.mu.Lock()
			done := r.state == StateDone
			r.mu.Unlock()
			if !done {
				continue
			}
			delete(x.byID, g.ek)
			x.dropFinishedLocked(r)
		}
		x.tombLocked(g.ek, g.why)
	}
	x.mu.Unlock()
}

// load reads tenant's execution id from disk; nil when it is not there.
func (x *Store) load(ek execKey) *Record {
	var v []byte
	_ = x.disk.db.View(func(tx *bolt.Tx) error {
		k := tx.Bucket(bucketID).Get(idKey(ek.tenant, ek.id))
		if k == nil {
			return nil
		}
		if b := tx.Bucket(bucketX).Get(k); b != nil {
			v, _ = getValue(tx, k, b)
		}
		return nil
	})
	if v == nil {
		return nil
	}
	r, err := x.decodeRec(v)
	if err != nil {
		return nil
	}
	return r
}

// Close writes what is queued, syncs and closes the file. A store
// without one has nothing to close. Idempotent.
func (x *Store) Close() error {
	d := x.disk
	if d == nil {
		return nil
	}
	var err error
	d.closeOnce.Do(func() {
		close(d.stop)
		<-d.done
		err = errors.Join(d.db.Sync(), d.db.Close())
	})
	return err
}

// DiskStats is what the file holds.
type DiskStats struct {
	Path    string
	Records int64
	Bytes   int64
}

// Disk reports what the store's file holds; ok is false without one.
func (x *Store) Disk() (DiskStats, bool) {
	if x.disk == nil {
		return DiskStats{}, false
	}
	return DiskStats{Path: x.disk.path, Records: x.disk.count.Load(), Bytes: x.disk.bytes.Load()}, true
}
