package gateway

import (
	"bytes"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/router"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/cluster"
	"github.com/aiod/aiod/gateway/jupyterapi"
	"github.com/aiod/aiod/gateway/live"
	"github.com/aiod/aiod/gateway/mcp"
	"github.com/aiod/aiod/gateway/terminals"
	"github.com/aiod/aiod/gateway/wsock"
	"github.com/aiod/aiod/stream"
)

// MetricsPath is where the Prometheus text format is served.
const MetricsPath = "/metrics"

// The HTTP server's own counter and duration (kept in the daemon's
// stream.Counters, as every count is).
const (
	httpRequests = "http_requests"                 // labels: route (the router's pattern), method, code
	httpSeconds  = "http_request_duration_seconds" // labels: route, method
)

// families describes every counter and duration the daemon keeps: those
// of package stream and those of the surfaces that count.
var families = mergeFamilies(stream.Families, wsock.Families, mcp.Families, map[string]stream.Family{
	httpRequests: {Help: "HTTP requests answered, by route pattern, method and status code.", Labels: []string{"route", "method", "code"}},
	httpSeconds:  {Help: "Time to answer an HTTP request (for a WebSocket, its upgrade).", Labels: []string{"route", "method"}},
	// Replicas (--cluster-nats; docs/scale-out.md).
	cluster.Forwards:        {Help: "Requests this replica forwarded to their tenant's home, by replica and outcome (answered, unreachable).", Labels: []string{"to", "outcome"}},
	cluster.ForwardSeconds:  {Help: "Time from forwarding a request to the home's answer header (a WebSocket: its pipe set up), by replica.", Labels: []string{"to"}},
	cluster.Placements:      {Help: "Tenants this replica placed in the cluster's directory, by why (new; moved: their home stopped beating).", Labels: []string{"why"}},
	cluster.Handovers:       {Help: "Saved sessions handed over at this replica's stop (out) and taken in from a tenant's last home (in).", Labels: []string{"direction"}},
	cluster.Checkpoints:     {Help: "Sessions this replica wrote to the cluster's object store after they ran code (--cluster-checkpoint), by outcome (written, failed).", Labels: []string{"outcome"}},
	cluster.CheckpointFiles: {Help: "Tenants' files this replica wrote with their checkpoints and handovers, by outcome (written, failed, too_large: over --cluster-files-max, left on this replica).", Labels: []string{"outcome"}},
	cluster.Executions:      {Help: "Finished executions this replica wrote to the cluster's store, by outcome (written, failed, dropped: its queue of 512 was full).", Labels: []string{"outcome"}},
	cluster.TakeInSecs:      {Help: "Time to take in a tenant's checkpoint (its saved sessions and files) at its new home, before its first call there is served: what a failover or a handover adds to that call."},
	cluster.CheckpointSecs:  {Help: "Time to checkpoint one session: its snapshot in the kernel and its write to the object store."},
})

func mergeFamilies(ms ...map[string]stream.Family) map[string]stream.Family {
	out := map[string]stream.Family{}
	for _, m := range ms {
		for k, f := range m {
			out[k] = f
		}
	}
	return out
}

// metrics is one server's Prometheus registry. Counts are not kept here:
// they live in stream.Counters (every count aiod keeps, in one place), and
// a collector turns a snapshot of them into counters at each scrape. What
// is kept here is what Counters cannot hold: the histograms of the
// durations Counters hands on (it is their stream.Observer), and the
// gauges, read from the live state at each scrape.
type metrics struct {
	reg  *prometheus.Registry
	hist map[string]*prometheus.HistogramVec // by stream duration name
	nlab map[string]int                      // label count of each histogram
	obs  sync.Map                            // obsKey -> prometheus.Observer: Observe's cells
}

// Histogram buckets, in seconds. Executions run from a millisecond to the
// 900 s maximum timeout; starts from a pooled take (microseconds) to a
// remote kernel on a cluster (minutes); HTTP answers are mostly executions.
var (
	execBuckets  = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900}
	startBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60, 120}
	httpBuckets  = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900}
)

func newMetrics(s *Server, c *stream.Counters) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), hist: map[string]*prometheus.HistogramVec{}, nlab: map[string]int{}}
	for name, buckets := range map[string][]float64{
		stream.ExecutionSeconds: execBuckets, stream.StartSeconds: startBuckets, httpSeconds: httpBuckets,
		cluster.ForwardSeconds: httpBuckets, cluster.CheckpointSecs: startBuckets, cluster.TakeInSecs: startBuckets,
	} {
		f := families[name]
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aiod_" + name, Help: f.Help, Buckets: buckets,
		}, f.Labels)
		m.hist[name], m.nlab[name] = h, len(f.Labels)
		m.reg.MustRegister(h)
	}
	m.reg.MustRegister(
		&countersCollector{c: c, descs: map[string]*prometheus.Desc{}},
		&liveCollector{s: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	c.SetObserver(m)
	return m
}

// Observe is stream.Observer: a duration into its histogram.
// Each histogram's cell is looked up once per label (a handful: languages
// and backends), not split and hashed at every execution.
func (m *metrics) Observe(name, label string, v float64) {
	k := obsKey{name, label}
	if o, ok := m.obs.Load(k); ok {
		o.(prometheus.Observer).Observe(v)
		return
	}
	h := m.hist[name]
	if h == nil {
		return
	}
	o := h.WithLabelValues(stream.SplitLabels(label, m.nlab[name])...)
	m.obs.Store(k, o)
	o.Observe(v)
}

type obsKey struct{ name, label string }

// countersCollector serves every counter of a stream.Counters as a
// Prometheus counter named aiod_<name>_total, labelled as
// stream.Families describes it. It is unchecked (describes nothing up
// front), so a counter added anywhere in aiod is served without a change
// here.
type countersCollector struct {
	c     *stream.Counters
	mu    sync.Mutex
	descs map[string]*prometheus.Desc
}

func (cc *countersCollector) Describe(chan<- *prometheus.Desc) {}

func (cc *countersCollector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cc.c.Snapshot() {
		f, known := families[c.Name]
		var vals []string
		switch {
		case !known:
			vals = []string{c.Label}
		case len(f.Labels) > 0:
			vals = stream.SplitLabels(c.Label, len(f.Labels))
		}
		if m, err := prometheus.NewConstMetric(cc.desc(c.Name), prometheus.CounterValue, float64(c.Value), vals...); err == nil {
			ch <- m
		}
	}
}

// desc is the descriptor of counter name. The label set of a name is fixed
// by its Family; a name Families does not know gets one label, "label".
func (cc *countersCollector) desc(name string) *prometheus.Desc {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if d := cc.descs[name]; d != nil {
		return d
	}
	f, known := families[name]
	labels, help := f.Labels, f.Help
	if !known {
		labels, help = []string{"label"}, "aiod counter "+name+"."
	}
	d := prometheus.NewDesc("aiod_"+name+"_total", help, labels, nil)
	cc.descs[name] = d
	return d
}

var (
	sessionsDesc = prometheus.NewDesc("aiod_sessions", "Named sessions alive, by language and backend.", []string{"language", "backend"}, nil)
	wsConnsDesc  = prometheus.NewDesc("aiod_ws_connections", "WebSockets open, by route.", []string{"route"}, nil)
	poolReady    = prometheus.NewDesc("aiod_pool_ready", "Runtimes waiting in a prewarm pool.", []string{"pool"}, nil)
	buildDesc    = prometheus.NewDesc("aiod_build_info", "Always 1; the labels say which aiod this is.", []string{"version", "goversion", "commit"}, nil)
	egressDesc   = prometheus.NewDesc("aiod_egress_total", "Connections tenant runtimes asked the egress proxy for (--runtime-network allow), by result: allowed or refused.", []string{"result"}, nil)
	tenantsDesc  = prometheus.NewDesc("aiod_tenants", "Tenants whose sandbox (folders, uid, network namespace) aiod holds, under --isolation tenant.", nil, nil)
	heldDesc     = prometheus.NewDesc("aiod_held_code_bytes", "Bytes of code that calls waiting in a session's queue or running hold in memory (bounded by --held-code-tenant and --held-code-total).", nil, nil)
)

// liveCollector serves the gauges, read from the server's state at each
// scrape.
type liveCollector struct{ s *Server }

func (lc *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- wsConnsDesc
	ch <- poolReady
	ch <- buildDesc
	ch <- egressDesc
	ch <- tenantsDesc
	ch <- heldDesc
}

func (lc *liveCollector) Collect(ch chan<- prometheus.Metric) {
	s := lc.s
	type lb struct{ lang, backend string }
	sessions := map[lb]int{{"python", s.pythonBackend()}: 0, {"javascript", "native"}: 0, {"bash", "native"}: 0}
	for _, ss := range s.reg.ListAll() {
		sessions[lb{ss.Language, ss.Backend.Name}]++
	}
	for k, n := range sessions {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n), k.lang, k.backend)
	}
	conns := map[string]int{live.Route: 0, jupyterapi.ChannelsRoute: 0, terminals.SocketRoute: 0}
	for route, n := range s.hub.Open() {
		conns[route] += n
	}
	for route, n := range conns {
		ch <- prometheus.MustNewConstMetric(wsConnsDesc, prometheus.GaugeValue, float64(n), route)
	}
	for name, ps := range s.rt.PoolStats("") {
		ch <- prometheus.MustNewConstMetric(poolReady, prometheus.GaugeValue, float64(ps.Ready), name)
	}
	b := Build()
	ch <- prometheus.MustNewConstMetric(buildDesc, prometheus.GaugeValue, 1, b.Version, b.GoVersion, b.Commit)
	if n, ok := s.rt.TenantCount(); ok {
		ch <- prometheus.MustNewConstMetric(tenantsDesc, prometheus.GaugeValue, float64(n))
	}
	_, held := s.core.Held("")
	ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(held))
	if allowed, refused, ok := s.rt.Egress(); ok {
		ch <- prometheus.MustNewConstMetric(egressDesc, prometheus.CounterValue, float64(allowed), "allowed")
		ch <- prometheus.MustNewConstMetric(egressDesc, prometheus.CounterValue, float64(refused), "refused")
	}
}

// serveMetrics answers GET /metrics in the Prometheus text format (0.0.4).
func (s *Server) serveMetrics(ctx *fasthttp.RequestCtx) {
	mfs, err := s.metrics.reg.Gather()
	if err != nil && len(mfs) == 0 {
		api.Fail(ctx, fasthttp.StatusInternalServerError, "gather metrics: "+err.Error())
		return
	}
	var buf bytes.Buffer
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	enc := expfmt.NewEncoder(&buf, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			api.Fail(ctx, fasthttp.StatusInternalServerError, "encode metrics: "+err.Error())
			return
		}
	}
	ctx.Response.Header.Set("Content-Type", string(format))
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBody(buf.Bytes())
}

// httpMethods are the methods the request metrics name; any other is
// "other", so that a client cannot grow the label set.
var httpMethods = map[string]string{
	"GET": "GET", "HEAD": "HEAD", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH",
	"DELETE": "DELETE", "OPTIONS": "OPTIONS",
}

// countRequests wraps the whole handler (the guard included): every
// request is counted under the router pattern that answered it, or
// "unmatched" when none did (unknown paths, and requests the guard
// refused before routing). The counter cell and the histogram of each
// (route, method, code) are looked up once and kept.
func (s *Server) countRequests(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	c := s.reg.Counters()
	hist := s.metrics.hist[httpSeconds]
	type key struct {
		route, method string
		code          int
	}
	type cell struct {
		n   *atomic.Int64
		dur prometheus.Observer
	}
	var cells sync.Map // key -> *cell
	return func(ctx *fasthttp.RequestCtx) {
		began := time.Now()
		next(ctx)
		route, _ := ctx.UserValue(router.MatchedRoutePathParam).(string)
		if route == "" {
			route = "unmatched"
		}
		method, ok := httpMethods[string(ctx.Method())]
		if !ok {
			method = "other"
		}
		k := key{route, method, ctx.Response.StatusCode()}
		v, ok := cells.Load(k)
		if !ok {
			v, _ = cells.LoadOrStore(k, &cell{
				n:   c.Cell(httpRequests, stream.Labels(route, method, strconv.Itoa(k.code))),
				dur: hist.WithLabelValues(route, method),
			})
		}
		e := v.(*cell)
		e.n.Add(1)
		e.dur.Observe(time.Since(began).Seconds())
	}
}
