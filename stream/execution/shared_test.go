package execution

import (
	"errors"
	"sync"
	"testing"
)

// mapShared is a Shared in memory: what the cluster's object store is to
// replicas, for one test.
type mapShared struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *mapShared) Put(tenant, id string, rec func() ([]byte, error)) {
	b, err := rec()
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	s.m[tenant+"\x00"+id] = b
	s.mu.Unlock()
}

func (s *mapShared) Get(tenant, id string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[tenant+"\x00"+id]
	return b, ok
}

// An execution that finished in one store is answered by another that
// shares its Shared (another replica): its result, to its tenant only.
func TestSharedStoreAnswersAnotherReplica(t *testing.T) {
	sh := &mapShared{m: map[string][]byte{}}
	home := NewStore(Config{LogBytes: 1 << 20, Shared: sh})
	r, _, err := home.Claim("alice", "e1", Key{Language: "python", SessionID: "s", Code: "print(1)"})
	if err != nil {
		t.Fatal(err)
	}
	r.Started(0)
	finishRecord(r, "hello\n")

	other := NewStore(Config{LogBytes: 1 << 20, Shared: sh})
	got, err := other.Get("alice", "e1")
	if err != nil {
		t.Fatalf("alice's execution through another store: %v", err)
	}
	if v := got.View(); v.State != StateDone || v.Result == nil || v.Result.Text("stdout") != "hello\n" || v.SessionID != "s" {
		t.Fatalf("alice's execution through another store: %+v", v)
	}
	if _, err := other.Get("bob", "e1"); !errors.Is(err, ErrNoExecution) {
		t.Fatalf("bob asking for alice's execution id: %v, want ErrNoExecution", err)
	}
	if _, err := other.Get("alice", "e2"); !errors.Is(err, ErrNoExecution) {
		t.Fatalf("an id nobody ran: %v, want ErrNoExecution", err)
	}
}
