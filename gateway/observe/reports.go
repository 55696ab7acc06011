package observe

import (
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/goccy/go-json"
)

// A report is two files in the tenant's folder: ID.jsonl.gz, gzip'd JSON
// lines (the observation's header, then its samples and events in the
// order they came; a guardrail's report has its last samples after its
// events), and ID.json, its reportInfo.

// reportInfo is the reference's ObservationReportInfo (and export result).
type reportInfo struct {
	ReportID  string    `json:"report_id"`
	SessionID *string   `json:"session_id"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
	Path      string    `json:"path"` // relative to aiod's state directory
	SizeBytes int64     `json:"size_bytes"`
}

var reportIDPattern = regexp.MustCompile(`^rpt-[0-9a-f]{12}$`)

// header is a report's first line.
type header struct {
	SessionID     *string      `json:"session_id"`
	Mode          string       `json:"mode"`
	Reason        string       `json:"reason"`
	StartedAt     *time.Time   `json:"started_at"`
	EndsAt        *time.Time   `json:"ends_at"`
	Interval      float64      `json:"interval_seconds"`
	CreatedAt     time.Time    `json:"created_at"`
	DroppedLines  int          `json:"dropped_lines"` // past the run file's cap
	Observation   *observation `json:"observation,omitempty"`
	SamplesInFile bool         `json:"samples_in_file"`
}

// writeReport writes a report of o (nil: a single reading now) for
// tenant.
func (s *Surface) writeReport(tenant string, o *observation, reason string) (reportInfo, error) {
	var now []liveSnapshot
	if o == nil {
		now = []liveSnapshot{s.readNow(tenant, 20, true, true, false)}
	}
	return s.writeReportIn(s.tenantDir(tenant), o, reason, now)
}

// writeReportIn writes a report of o, or of the samples tail without o,
// in the tenant folder dir, and drops its oldest past maxReports.
func (s *Surface) writeReportIn(dir string, o *observation, reason string, tail []liveSnapshot) (reportInfo, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return reportInfo{}, err
	}
	now := time.Now().UTC()
	id := newID("rpt-")
	info := reportInfo{ReportID: id, Reason: reason, CreatedAt: now}
	h := header{Mode: "off", Reason: reason, CreatedAt: now}
	var body []byte
	if o != nil {
		sid, started := o.ID, o.Started.UTC()
		info.SessionID, h.SessionID, h.Mode, h.StartedAt, h.Interval, h.Observation = &sid, &sid, o.Mode, &started, o.Interval, o
		if !o.Ends.IsZero() {
			e := o.Ends.UTC()
			h.EndsAt = &e
		}
		body = s.runSoFar(o)
		s.mu.Lock()
		h.DroppedLines = o.dropped
		tail = append(tail, o.samples...)
		s.mu.Unlock()
		h.SamplesInFile = o.Mode == "capture"
	}
	tmp, err := os.CreateTemp(dir, ".report-*")
	if err != nil {
		return reportInfo{}, err
	}
	defer os.Remove(tmp.Name())
	zw := gzip.NewWriter(tmp)
	enc := json.NewEncoder(zw)
	err = enc.Encode(line{Type: "observation", Data: h})
	if err == nil {
		_, err = zw.Write(body)
	}
	for _, snap := range tail {
		if err == nil {
			err = enc.Encode(line{Type: "sample", Data: snap})
		}
	}
	err = errors.Join(err, zw.Close(), tmp.Close())
	if err != nil {
		return reportInfo{}, err
	}
	gz := filepath.Join(dir, id+".jsonl.gz")
	if err := os.Rename(tmp.Name(), gz); err != nil {
		return reportInfo{}, err
	}
	if st, err := os.Stat(gz); err == nil {
		info.SizeBytes = st.Size()
	}
	rel, _ := filepath.Rel(filepath.Dir(s.dir), gz)
	info.Path = rel
	b, _ := json.Marshal(info)
	if err := os.WriteFile(filepath.Join(dir, id+".json"), b, 0o600); err != nil {
		_ = os.Remove(gz)
		return reportInfo{}, err
	}
	trimReports(dir)
	return info, nil
}

// listReports is the reports in tenant folder dir, newest first.
func listReports(dir string) []reportInfo {
	ents, _ := os.ReadDir(dir)
	out := []reportInfo{}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !reportIDPattern.MatchString(id) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		var info reportInfo
		if err != nil || json.Unmarshal(b, &info) != nil || info.ReportID != id {
			continue
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out
}

// trimReports drops the oldest reports in dir past maxReports.
func trimReports(dir string) {
	list := listReports(dir)
	for _, old := range list[min(len(list), maxReports):] {
		_ = removeReport(dir, old.ReportID)
	}
}

// reportOf is tenant's report id; false when it has none of that id.
func (s *Surface) reportOf(tenant, id string) (reportInfo, bool) {
	if !reportIDPattern.MatchString(id) {
		return reportInfo{}, false
	}
	b, err := os.ReadFile(filepath.Join(s.tenantDir(tenant), id+".json"))
	var info reportInfo
	if err != nil || json.Unmarshal(b, &info) != nil || info.ReportID != id {
		return reportInfo{}, false
	}
	return info, true
}

// removeReport removes report id from dir.
func removeReport(dir, id string) error {
	return errors.Join(os.Remove(filepath.Join(dir, id+".jsonl.gz")), os.Remove(filepath.Join(dir, id+".json")))
}

// recoverRuns makes a report (reason "interrupted") of each run file a
// daemon that did not stop cleanly left, so that its samples are not
// lost, and removes the file.
func (s *Surface) recoverRuns() {
	runs, _ := filepath.Glob(filepath.Join(s.dir, "*", "run-*.jsonl"))
	for _, f := range runs {
		dir := filepath.Dir(f)
		id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "run-"), ".jsonl")
		o := &observation{ID: id, Mode: "capture", runFile: f}
		if st, err := os.Stat(f); err == nil {
			o.written = st.Size()
			o.Started = st.ModTime()
		}
		// The tenant is known by its folder only: write the report there.
		if info, err := s.writeReportIn(dir, o, "interrupted", nil); err != nil {
			s.log.Warn("observation left by an earlier daemon not kept", "file", f, "err", err)
		} else {
			s.log.Info("observation left by an earlier daemon kept as a report", "report", info.ReportID)
		}
		_ = os.Remove(f)
	}
}
