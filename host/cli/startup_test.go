package cli

import (
	"fmt"
	"testing"
	"time"

	"github.com/walcast/walcast/host/pgtest"
)

func TestStartupErrorsSayWhatToDo(t *testing.T) {
	dsn, _ := newSource(t, `CREATE TABLE keyless (v int); CREATE TABLE items (id int PRIMARY KEY)`)

	t.Run("table without key", func(t *testing.T) {
		p := writePipeline(t, "nokey", dsn, []string{"public.keyless"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/x"})
		out := runOnce(t, p)
		wantAll(t, out, "public.keyless", "no primary key", "ALTER TABLE public.keyless REPLICA IDENTITY FULL", "allow_keyless")
	})
	t.Run("missing table", func(t *testing.T) {
		p := writePipeline(t, "notable", dsn, []string{"public.nope"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/x"})
		wantAll(t, runOnce(t, p), "public.nope does not exist")
	})
	t.Run("unreachable database", func(t *testing.T) {
		addr := freeAddr(t) // nothing listens there
		p := writePipeline(t, "unreach", fmt.Sprintf("postgres://postgres@%s/x?connect_timeout=3", addr), []string{"public.items"},
			sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/x"})
		wantAll(t, runOnce(t, p), "cannot reach the source database", addr, "PostgreSQL is running")
	})
	t.Run("missing plugin", func(t *testing.T) {
		p := writePipeline(t, "noplugin", dsn, []string{"public.items"}, sinkSpec{ID: "x", SinkType: "nosuch", Config: " "})
		// run without --plugin-dir: the search path is the env var, then
		// the executable's directory.
		out := runOnce(t, p, "WALCAST_PLUGIN_DIR="+t.TempDir())
		wantAll(t, out, "walcast-sink-nosuch", binDir)
	})
}

func TestWalLevelMustBeLogical(t *testing.T) {
	own := pgtest.New(t, pgtest.Options{Settings: []string{"wal_level = replica"}})
	db := connect(t, own.DSN("postgres"))
	exec1(t, db, `CREATE TABLE items (id int PRIMARY KEY)`)
	p := writePipeline(t, "replica", own.DSN("postgres"), []string{"public.items"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/x"})
	wantAll(t, runOnce(t, p), `wal_level is "replica"`, "wal_level = logical", "restart PostgreSQL")
}

func TestAllowKeylessDeliversKeyNull(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE keyless (v int)`)
	rcv := newReceiver(t)
	p := writePipeline(t, "allowkeyless", dsn, []string{"public.keyless"}, sinkSpec{ID: "hook", URL: rcv.URL})
	withSource(t, p, "  allow_keyless = true\n")
	proc := startCapturing(t, db, p)
	exec1(t, db, `INSERT INTO keyless VALUES (1)`)
	waitFor(t, "keyless insert", time.Minute, func() bool { return rcv.count() == 1 })
	proc.stop()
	if ev := rcv.events()[0]; ev.Key != "null" || ev.Op != "insert" {
		t.Fatalf("keyless event: %s", ev.Raw)
	}
}
