package v1

import (
	"os"
	"path/filepath"
	"sync"

	"github.com/goccy/go-json"
)

// tenantStore is what the surface keeps per tenant by name (hooks,
// skills), in one JSON file of the state directory ("" keeps it in
// memory), rewritten whole at each change.
type tenantStore[T any] struct {
	mu       sync.Mutex
	file     string
	byTenant map[string]map[string]T // guarded by mu
}

// load reads the store's file name in stateDir, if there is one.
func (st *tenantStore[T]) load(stateDir, name string) {
	st.byTenant = map[string]map[string]T{}
	if stateDir == "" {
		return
	}
	st.file = filepath.Join(stateDir, name)
	if b, err := os.ReadFile(st.file); err == nil {
		_ = json.Unmarshal(b, &st.byTenant)
	}
}

// saveLocked writes the store to its file at once (a temporary file
// renamed), with mu held.
func (st *tenantStore[T]) saveLocked() error {
	if st.file == "" {
		return nil
	}
	b, err := json.Marshal(st.byTenant)
	if err != nil {
		return err
	}
	tmp := st.file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, st.file)
}
