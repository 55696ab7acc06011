package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/cluster"
	"github.com/aiod/aiod/gateway/guard"
	"github.com/aiod/aiod/stream/backend"
)

// ClusterConfig makes the daemon a replica of a cluster over NATS
// JetStream (docs/scale-out.md); NATS "" is a single daemon.
type ClusterConfig struct {
	NATS      string        // --cluster-nats
	Advertise string        // --cluster-advertise: HOST:PORT the other replicas reach this one at
	Secret    []byte        // --cluster-secret-file's content: signs forwarded callers
	Lease     time.Duration // --cluster-lease
	// Checkpoint is how soon after a named session ran code it is
	// written to the cluster's object store (--cluster-checkpoint); 0:
	// only at a stop.
	Checkpoint time.Duration
	// FilesMax bounds the tar of a tenant's own files that goes with its
	// checkpoint (--cluster-files-max); 0: files never move.
	FilesMax int64
}

// ClusterPath answers what the replica knows of the cluster.
const ClusterPath = "/v2/cluster"

// joinCluster starts the replica's part of the cluster when cfg asks for
// one.
func (s *Server) joinCluster(cfg ClusterConfig, counter cluster.Counter) error {
	if cfg.NATS == "" {
		return nil
	}
	if len(cfg.Secret) < 16 {
		return fmt.Errorf("--cluster-secret-file: the cluster's secret must be at least 16 bytes (it signs the callers replicas forward), got %d", len(cfg.Secret))
	}
	cl, err := cluster.Start(context.Background(), cluster.Config{NATS: cfg.NATS, Advertise: cfg.Advertise,
		Lease: cfg.Lease, Logger: s.log, Counter: counter, Load: func() cluster.Load {
			return cluster.Load{Sessions: s.reg.Len(), MemAvailable: backend.MemInfo("MemAvailable")}
		}})
	if err != nil {
		return err
	}
	tickets, err := cl.Tickets(context.Background(), s.guard.TicketTTL())
	if err != nil {
		_ = cl.Close(context.Background())
		return err
	}
	s.guard.SetClusterSecret(cfg.Secret)
	s.guard.SetSharedTickets(tickets)
	s.cluster = cl
	s.sharedExecs = cl.ShareExecutions(s.execs.Config().Retention)
	if cfg.Checkpoint > 0 && s.snaps != nil {
		s.checkpoints = newCheckpoints(s, cfg.Checkpoint)
	}
	return nil
}

// servedHere are the routes a replica answers itself: nothing of a tenant
// is behind them. Tickets are the cluster's (guard.SetSharedTickets).
func servedHere(path string) bool {
	switch path {
	case "/", "/healthz", MetricsPath, ClusterPath, guard.TicketsPath:
		return true
	}
	for _, p := range openAPIPaths {
		if path == p {
			return true
		}
	}
	return strings.HasPrefix(path, "/static/")
}

// nameReplica makes every answer name the replica that ran it (a forwarded
// answer keeps its home's name).
func (s *Server) nameReplica(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if s.cluster == nil {
		return next
	}
	id := s.cluster.ID()
	return func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set(cluster.ReplicaHeader, id)
		next(ctx)
	}
}

// toHome runs a request of a tenant here when this replica is its home,
// and forwards it to the home otherwise. A request another replica
// forwarded is the home's own by then: it runs here.
func (s *Server) toHome(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if s.cluster == nil {
		return next
	}
	return func(ctx *fasthttp.RequestCtx) {
		if servedHere(string(guard.RoutePath(ctx))) {
			next(ctx)
			return
		}
		if guard.ForwardedBy(ctx) != "" { // the forwarder took this replica for the caller's home
			tenant := guard.CallerOf(ctx).Tenant()
			if to := s.cluster.Moved(context.Background(), tenant); to != "" {
				// Its view is older than the directory's: the tenant moved
				// (this replica missed heartbeats). Never forwarded twice.
				ctx.Response.Header.Set("Retry-After", "1")
				api.Fail(ctx, fasthttp.StatusServiceUnavailable, "the caller's tenant has moved to replica "+to+"; send the request again")
				return
			}
			s.takeIn(tenant)
			next(ctx)
			return
		}
		caller := guard.CallerOf(ctx)
		hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		home, err := s.cluster.Home(hctx, caller.Tenant())
		cancel()
		switch {
		case err != nil:
			ctx.Response.Header.Set("Retry-After", "1")
			api.Fail(ctx, fasthttp.StatusServiceUnavailable, "the cluster cannot say which replica is this caller's home: "+err.Error())
		case home.ID == s.cluster.ID():
			s.takeIn(caller.Tenant())
			next(ctx)
		default:
			signed := s.guard.SignForwarded(caller, s.cluster.ID(), ctx.Method(), ctx.Request.RequestURI())
			s.cluster.Forward(ctx, home, guard.ForwardedHeader, signed)
		}
	}
}

// takeIn takes in tenant's checkpoint the first time this replica serves
// it: the saved sessions its last home handed over wait for a restore on
// their next call here (bounded: 10 s; past it the tenant is served
// without them, and the failure logged).
func (s *Server) takeIn(tenant string) {
	if s.snaps == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.cluster.Adopt(ctx, tenant, func(ctx context.Context) error {
		began := time.Now()
		n, files := 0, false
		err := s.cluster.Restore(ctx, tenant, func(name string, r io.Reader, size int64, meta map[string]string) error {
			if name == filesObject {
				files = true
				return s.takeFiles(ctx, tenant, r, size, meta)
			}
			took, err := s.snaps.Import(tenant, r, size)
			if took {
				n++
			}
			return err
		})
		if n > 0 || files {
			s.cluster.Observe(cluster.TakeInSecs, "", time.Since(began).Seconds())
			s.cluster.Count(cluster.Handovers, "in", int64(n))
			s.log.Info("cluster: took in a tenant's saved sessions from its last home", "tenant", tenant, "sessions", n, "files", files)
		}
		return err
	})
}

// handOver writes the checkpoint of every tenant this replica is home to:
// the saved sessions (the registry has saved them as it closed). Shutdown
// calls it before the replica leaves the directory, so that a tenant's
// next home finds them.
func (s *Server) handOver(ctx context.Context) {
	if s.snaps == nil {
		return
	}
	for _, tenant := range s.cluster.Homed() {
		files := s.snaps.Handover(tenant)
		err := s.cluster.Checkpoint(ctx, tenant, func(put func(string, map[string]string, io.Reader) error) error {
			for _, f := range files {
				fh, err := os.Open(f.Path)
				if err != nil {
					return err
				}
				err = put(checkpointName(f.Info.Language, f.Info.SessionID), nil, fh)
				fh.Close()
				if err != nil {
					return err
				}
			}
			if !s.movesFiles() {
				return nil
			}
			fh, meta, err := s.archiveFiles(ctx, tenant)
			if err != nil || fh == nil {
				return err
			}
			defer fh.Close()
			if err = put(filesObject, meta, fh); err == nil {
				s.cluster.Count(cluster.CheckpointFiles, "written", 1)
			}
			return err
		})
		if err != nil {
			s.log.Warn("cluster: hand over a tenant's saved sessions", "tenant", tenant, "err", err)
			continue
		}
		s.cluster.Count(cluster.Handovers, "out", int64(len(files)))
		s.log.Info("cluster: handed over a tenant's saved sessions", "tenant", tenant, "sessions", len(files))
	}
}

// snapshotKey is the key that seals snapshots on every replica of a
// cluster, derived from its secret (nil outside a cluster: the state
// directory's own).
func snapshotKey(cfg ClusterConfig) []byte {
	if cfg.NATS == "" {
		return nil
	}
	m := hmac.New(sha256.New, cfg.Secret)
	m.Write([]byte("aiod snapshot seal v1"))
	return m.Sum(nil)
}

// clusterAnswer is GET /v2/cluster.
type clusterAnswer struct {
	Enabled bool                 `json:"enabled"`
	Replica *string              `json:"replica"`
	Home    *string              `json:"home"` // the caller's home, when it has one
	Members []cluster.MemberView `json:"members"`
}

func (s *Server) v2Cluster(ctx *fasthttp.RequestCtx) {
	a := clusterAnswer{Members: []cluster.MemberView{}}
	if s.cluster != nil {
		id := s.cluster.ID()
		a.Enabled, a.Replica, a.Members = true, &id, s.cluster.Members()
		if h := s.cluster.HomeOf(guard.CallerOf(ctx).Tenant()); h != "" {
			a.Home = &h
		}
	}
	api.OK(ctx, a)
}
