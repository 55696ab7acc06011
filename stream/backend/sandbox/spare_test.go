package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSpareAdoption: the spare goes to a tenant aiod has no folder of, not
// to one it has; the adopter keeps the spare's uid, folders (renamed) and
// network, and its proxy names it; a spare is removed at Close, and one
// left by a daemon that did not close is removed at the next start.
func TestSpareAdoption(t *testing.T) {
	ts, _ := newTenants(t, NetworkAllow)
	var adopted [][2]*Tenant
	ts.OnAdopt(func(sp, tn *Tenant) { adopted = append(adopted, [2]*Tenant{sp, tn}) })
	var spare *Tenant
	if made, err := ts.MakeSpare(func(sp *Tenant) { spare = sp }); !made || err != nil || spare == nil {
		t.Fatalf("MakeSpare: %v %v", made, err)
	}
	if made, err := ts.MakeSpare(nil); made || err != nil {
		t.Fatalf("a second MakeSpare with a spare: %v %v", made, err)
	}
	if !strings.HasPrefix(filepath.Base(spare.Dir), sparePrefix) || spare.Key != SpareKey {
		t.Fatalf("spare %q in %s", spare.Key, spare.Dir)
	}
	if err := os.WriteFile(filepath.Join(spare.View().Home, "made-ahead"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A tenant with a folder (seen before a restart) keeps its own.
	if err := os.Mkdir(filepath.Join(ts.dir, folderName("jwt:old")), 0o700); err != nil {
		t.Fatal(err)
	}
	old, err := ts.Get("jwt:old")
	if err != nil {
		t.Fatal(err)
	}
	if old.UID == spare.UID || len(adopted) != 0 || ts.spare != spare {
		t.Fatalf("jwt:old (uid %d) took the spare (uid %d)", old.UID, spare.UID)
	}

	// A new one adopts it.
	bob, err := ts.Get("jwt:bob")
	if err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 1 || adopted[0][0] != spare || adopted[0][1] != bob {
		t.Fatalf("OnAdopt calls: %v", adopted)
	}
	if again, _ := ts.Get("jwt:bob"); again != bob {
		t.Fatal("a second Get made another tenant")
	}
	dir := filepath.Join(ts.dir, folderName("jwt:bob"))
	v := bob.View()
	if bob.Key != "jwt:bob" || bob.Dir != dir || bob.UID != spare.UID || bob.net != spare.net || ts.spare != nil {
		t.Fatalf("bob: %+v, spare %+v", bob, spare)
	}
	for _, p := range []string{v.Home, v.Tmp, v.Work, v.Passwd, v.Group} {
		if p != "" && !strings.HasPrefix(p, dir+"/") {
			t.Errorf("bob's view keeps %s outside his folder", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(v.Home, "made-ahead")); err != nil || string(b) != "x" {
		t.Errorf("bob's HOME lost the spare's file: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "key")); string(b) != "jwt:bob\n" {
		t.Errorf("bob's key file: %q", b)
	}
	if _, err := os.Stat(spare.Dir); !os.IsNotExist(err) {
		t.Errorf("the spare's folder is still there: %v", err)
	}
	if got := *bob.proxy.tenant.Load(); got != "jwt:bob" {
		t.Errorf("bob's egress proxy logs tenant %q", got)
	}
	if carol, _ := ts.Get("jwt:carol"); carol.UID == bob.UID || carol.UID == old.UID || len(adopted) != 1 {
		t.Errorf("carol, without a spare: uid %d (bob %d, old %d)", carol.UID, bob.UID, old.UID)
	}

	// Close removes an unadopted spare; a leftover one goes at the next start.
	if _, err := ts.MakeSpare(func(sp *Tenant) { spare = sp }); err != nil {
		t.Fatal(err)
	}
	ts.Close()
	if _, err := os.Stat(spare.Dir); !os.IsNotExist(err) {
		t.Errorf("Close left the spare's folder: %v", err)
	}
	left := filepath.Join(ts.dir, sparePrefix+"left")
	if err := os.MkdirAll(filepath.Join(left, "home"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "uid"), []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	first, last := ts.UIDRange()
	ts2, err := NewTenants(Config{StateDir: ts.cfg.StateDir, FirstUID: first, LastUID: last, Workdir: ts.cfg.Workdir})
	if err != nil {
		t.Fatal(err)
	}
	defer ts2.Close()
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("a spare left by a stopped daemon is still there: %v", err)
	}
	if _, taken := ts2.used[1]; taken || len(ts2.used) != 3 {
		t.Errorf("uids after the restart: %v; want old's, bob's and carol's", ts2.used)
	}
	if b2, _ := ts2.Get("jwt:bob"); b2.UID != bob.UID {
		t.Errorf("bob's uid after the restart: %d, was %d", b2.UID, bob.UID)
	}
}
