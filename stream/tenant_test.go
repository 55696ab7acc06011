package stream

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Names belong to tenants: the same id is two sessions, and every lookup
// by name (Get, List, Kernel, Delete, DeleteOne, the ended log, the
// executions a session claims) sees only the asking tenant's.
func TestRegistryNamesPerTenant(t *testing.T) {
	fs := &fakes{}
	reg := fakeRegistry(t, fs)
	ctx := context.Background()
	const uuid = "0b6e8c3a-2a43-4c36-9d6e-5f0f3b7a1c2d"
	alice, created, err := reg.Open("alice", "python", uuid, fs.backend())
	if err != nil || !created || alice.Tenant != "alice" || alice.KernelID != uuid {
		t.Fatalf("alice's session: %+v %v %v", alice, created, err)
	}
	bob, created, err := reg.Open("bob", "python", uuid, fs.backend())
	if err != nil || !created || bob == alice {
		t.Fatalf("bob's session of the same id: created=%v %v, want one of his own", created, err)
	}
	if bob.KernelID == alice.KernelID {
		t.Fatal("two sessions share a kernel id")
	}
	if reg.Get("alice", "python", uuid) != alice || reg.Get("bob", "python", uuid) != bob || reg.Get("carol", "python", uuid) != nil {
		t.Fatal("Get crossed tenants")
	}
	if reg.Kernel("alice", uuid) != alice || reg.Kernel("bob", uuid) != nil || reg.Kernel("bob", bob.KernelID) != bob || reg.Kernel("alice", bob.KernelID) != nil {
		t.Fatal("Kernel crossed tenants")
	}
	if l := reg.List("bob"); len(l) != 1 || l[0] != bob {
		t.Fatalf("bob's list: %v", l)
	}
	if n := len(reg.ListAll()); n != 2 || reg.Len() != 2 {
		t.Fatalf("all tenants: %d listed, Len %d; want 2", n, reg.Len())
	}

	res, err := bob.Execute(ctx, ExecRequest{Code: "pass", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Executions().Get("alice", res.ExecutionID); err == nil {
		t.Fatal("alice sees the execution bob's session claimed")
	}
	if rec, err := reg.Executions().Get("bob", res.ExecutionID); err != nil || rec.Tenant != "bob" {
		t.Fatalf("bob's own execution: %v %v", rec, err)
	}

	if reg.Delete(ctx, "bob", "nope") != 0 || reg.DeleteOne(ctx, "carol", "python", uuid) || reg.Delete(ctx, "carol", uuid) != 0 {
		t.Fatal("a delete by name ended another tenant's session")
	}
	if reg.Delete(ctx, "alice", uuid) != 1 || reg.Get("bob", "python", uuid) != bob {
		t.Fatal("alice's delete did not end exactly her session")
	}
	// The ended log is per tenant: bob's next call is not told of alice's
	// delete, and her own new session of the id is.
	if res, _ := bob.Execute(ctx, ExecRequest{Code: "pass", Timeout: time.Second}); res.Fresh {
		t.Fatalf("bob was told of alice's delete: %q", res.Message())
	}
	again, created, _ := reg.Open("alice", "python", uuid, fs.backend())
	res, err = again.Execute(ctx, ExecRequest{Code: "pass", Timeout: time.Second})
	if err != nil || !created || !res.Fresh || !strings.Contains(res.Message(), "because the session was deleted") {
		t.Fatalf("alice's next session of the id: created=%v %v %q", created, err, res.Message())
	}
	if !reg.DeleteOne(ctx, "bob", "python", uuid) || reg.Get("alice", "python", uuid) != again {
		t.Fatal("bob's DeleteOne did not end exactly his session")
	}
}
