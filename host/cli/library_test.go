package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host"
)

// TestLibraryRetire: walcast library retire, the command line form of
// host.Retire, lists without --yes what a library stream left (its slot,
// the publications Open created, its rows) and drops exactly that with
// it, the dsn taken from $WALCAST_SOURCE_DSN.
func TestLibraryRetire(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	slot := "lib_retire_cli"
	t.Cleanup(func() { dropSlot(dsn, slot) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := host.Open(ctx, host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: slot})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitSlotReleased(t, db, slot)
	env := []string{"WALCAST_SOURCE_DSN=" + dsn}
	_, dry, code := walcastTimed(t, time.Minute, env, "library", "retire", slot)
	if code != 1 {
		t.Fatalf("dry run: exit %d\n%s", code, dry)
	}
	wantAll(t, dry, `walcast library retire would drop, for library stream on slot "lib_retire_cli" (pipeline "library:lib_retire_cli"):`,
		`replication slot "lib_retire_cli" (confirmed up to`, `publication "lib_retire_cli" (walcast created it)`, `publication "lib_retire_cli_keyless" (walcast created it)`,
		"the pipeline's rows in the walcast schema", "Run again with --yes")
	if slotCount(t, db, slot) != 1 {
		t.Fatal("the dry run dropped the slot")
	}
	out, _, code := walcastTimed(t, time.Minute, env, "library", "retire", slot, "--yes")
	if code != 0 {
		t.Fatalf("walcast library retire --yes: exit %d\n%s", code, out)
	}
	wantAll(t, out, `dropped replication slot "lib_retire_cli"`, `dropped publication "lib_retire_cli"`, `dropped publication "lib_retire_cli_keyless"`, "deleted the stream's rows")
	if n := slotCount(t, db, slot) + queryInt(t, db, `SELECT count(*) FROM pg_publication WHERE pubname LIKE 'lib_retire_cli%'`) +
		queryInt(t, db, `SELECT count(*) FROM walcast.pipelines WHERE pipeline = 'library:lib_retire_cli'`); n != 0 {
		t.Errorf("%d objects of the stream left after walcast library retire", n)
	}
	out, _, code = walcastTimed(t, time.Minute, env, "library", "retire", slot, "--yes")
	if code != 0 || !strings.Contains(out, "nothing to tear down") {
		t.Errorf("a second retire: exit %d\n%s", code, out)
	}
}
