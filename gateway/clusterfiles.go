package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/aiod/aiod/gateway/cluster"
	"github.com/aiod/aiod/stream/backend/sandbox"
)

// A tenant's own files (HOME, the working folder, /tmp, /var/tmp under
// --isolation tenant) go with its checkpoints and handovers as one tar,
// object filesObject, sealed with an HMAC under a key derived from the
// cluster's secret: the next home extracts only what a replica wrote.

// filesObject names a tenant's files in its checkpoint.
const filesObject = "files.tar"

// filesSealKey is the key that seals tenants' files in a cluster.
func filesSealKey(cfg ClusterConfig) []byte {
	m := hmac.New(sha256.New, cfg.Secret)
	m.Write([]byte("aiod files seal v1"))
	return m.Sum(nil)
}

// movesFiles says whether tenants' files go with their checkpoints here.
func (s *Server) movesFiles() bool {
	return s.cluster != nil && s.cfg.Cluster.FilesMax > 0 && s.rt.Tenanted()
}

// archiveFiles writes tenant's files to a temporary file, sealed: f is at
// its start (the caller closes it; it is already unlinked), seal the HMAC
// for the object's metadata. f is nil when the files are over
// --cluster-files-max: they stay here, and the log says so.
func (s *Server) archiveFiles(ctx context.Context, tenant string) (f *os.File, meta map[string]string, err error) {
	t, err := s.rt.TenantSandbox(tenant)
	if err != nil {
		return nil, nil, err
	}
	tmp, err := s.tempFile()
	if err != nil {
		return nil, nil, err
	}
	mac := hmac.New(sha256.New, filesSealKey(s.cfg.Cluster))
	_, err = t.ArchiveFiles(ctx, io.MultiWriter(tmp, mac), s.cfg.Cluster.FilesMax)
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		tmp.Close()
		if errors.Is(err, sandbox.ErrArchiveTooLarge) {
			s.cluster.Count(cluster.CheckpointFiles, "too_large", 1)
			s.log.Warn("cluster: a tenant's files are over --cluster-files-max and stay on this replica: a replica that takes the tenant over starts without them (mount a shared volume for files this large: docs/scale-out.md)",
				"tenant", tenant, "max_bytes", s.cfg.Cluster.FilesMax)
			return nil, nil, nil
		}
		return nil, nil, err
	}
	return tmp, map[string]string{"seal": hex.EncodeToString(mac.Sum(nil))}, nil
}

// tempFile is an unlinked temporary file in the state directory.
func (s *Server) tempFile() (*os.File, error) {
	f, err := os.CreateTemp(s.cfg.Isolation.StateDir, ".cluster-files-*")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return f, nil
}

// writeFiles puts tenant's files in its checkpoint now; files over the
// bound delete the copy an earlier checkpoint holds (it would bring back
// files older than the ones the tenant has).
func (s *Server) writeFiles(ctx context.Context, tenant string) error {
	f, meta, err := s.archiveFiles(ctx, tenant)
	if err != nil {
		s.cluster.Count(cluster.CheckpointFiles, "failed", 1)
		return err
	}
	if f == nil {
		return s.cluster.DropCheckpoints(ctx, tenant, filesObject)
	}
	defer f.Close()
	if err := s.cluster.PutCheckpoint(ctx, tenant, filesObject, meta, f); err != nil {
		s.cluster.Count(cluster.CheckpointFiles, "failed", 1)
		return err
	}
	s.cluster.Count(cluster.CheckpointFiles, "written", 1)
	return nil
}

// takeFiles restores tenant's files from its checkpoint (n bytes from r)
// once their seal verifies.
func (s *Server) takeFiles(ctx context.Context, tenant string, r io.Reader, n int64, meta map[string]string) error {
	if !s.movesFiles() {
		return nil // files do not move here (--cluster-files-max 0, or no tenant isolation)
	}
	want, err := hex.DecodeString(meta["seal"])
	if err != nil || len(want) != sha256.Size {
		return errors.New("a tenant's files in the checkpoint carry no seal: refused")
	}
	tmp, err := s.tempFile()
	if err != nil {
		return err
	}
	defer tmp.Close()
	var mac hash.Hash = hmac.New(sha256.New, filesSealKey(s.cfg.Cluster))
	if _, err := io.CopyN(io.MultiWriter(tmp, mac), r, n); err != nil {
		return err
	}
	if !hmac.Equal(mac.Sum(nil), want) {
		return errors.New("a tenant's files in the checkpoint do not verify with this cluster's secret: refused")
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	t, err := s.rt.TenantSandbox(tenant)
	if err != nil {
		return err
	}
	if err := t.RestoreFiles(ctx, tmp); err != nil {
		return fmt.Errorf("extract a tenant's files: %w", err)
	}
	return nil
}
