package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/pgtest"
)

// Tests of what happens when the slot, the publication or the database
// changes under walcast: each ends in an explicit, explained stop, and
// --accept-gap is the recorded way on.

var checkpointRe = regexp.MustCompile(`hook [0-9A-F]+/[0-9A-F]+:\d+`)

func TestSlotDroppedWhileStoppedRefusesUntilGapAccepted(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	truthSlot(t, dsn, db, "truth_lost")
	rcv := newReceiver(t)
	p := writePipeline(t, "lost", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	streamItems(t, db, p, "walcast_lost", rcv, 1, 10)

	exec1(t, db, `SELECT pg_drop_replication_slot('walcast_lost')`)
	insertItems(t, db, 11, 5) // the gap: no slot holds these

	out, code := walcastOut(t, "run", p, "--plugin-dir", binDir)
	if code != 1 {
		t.Fatalf("walcast run with its slot dropped: exit %d, want 1; output:\n%s", code, out)
	}
	t.Logf("refusal:\n%s", out)
	wantAll(t, out, "replication slot walcast_lost does not exist, but pipeline lost streamed from it before",
		"last checkpoints: hook ", "walcast run PIPELINE.hcl --accept-gap", "restore the slot")
	if !checkpointRe.MatchString(out) {
		t.Errorf("refusal does not name the sink's checkpoint:\n%s", out)
	}
	if strings.Contains(out, "created replication slot") || slotCount(t, db, "walcast_lost") != 0 {
		t.Fatalf("walcast created a new slot although it refused:\n%s", out)
	}
	status, code := walcastOut(t, "status", p)
	if code != exitRunRefuses {
		t.Fatalf("walcast status: exit %d, want %d (walcast run refuses)\n%s", code, exitRunRefuses, status)
	}
	wantAll(t, status, "slot walcast_lost: does not exist", "walcast run refuses to start (slot lost)")

	streamItems(t, db, p, "walcast_lost", rcv, 16, 5, "--accept-gap")

	status, _ = walcastOut(t, "status", p)
	gapRe := regexp.MustCompile(`gap accepted \S+ \(slot lost\): sink hook missed the changes after [0-9A-F]+/[0-9A-F]+:\d+ up to [0-9A-F]+/[0-9A-F]+`)
	t.Logf("status after --accept-gap:\n%s", status)
	if !gapRe.MatchString(status) {
		t.Fatalf("walcast status does not show the accepted gap:\n%s", status)
	}
	if strings.Contains(status, "refuses") {
		t.Fatalf("walcast status still says run refuses after the gap was accepted:\n%s", status)
	}
	// test_decoding saw every commit: exactly the five made while no slot
	// existed are missing, and nothing else.
	want := truth(t, db, "truth_lost", map[string]bool{"public.items": true})
	if len(want) != 20 {
		t.Fatalf("truth has %d changes, want 20", len(want))
	}
	if got, wantMissing := missingKeys(want, rcv.events()), itemKeys(11, 5); strings.Join(got, " ") != strings.Join(wantMissing, " ") {
		t.Fatalf("changes never delivered: %v, want exactly the gap %v", got, wantMissing)
	}
	// A clean restart after the gap streams on without refusing.
	streamItems(t, db, p, "walcast_lost", rcv, 21, 3)
}

func TestSlotDroppedWhileRunningStopsAndRestartRefuses(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	rcv := newReceiver(t)
	p := writePipeline(t, "droprun", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	w := startCapturing(t, db, p)
	w.waitLog(t, "streaming from slot")
	insertItems(t, db, 1, 3)
	waitFor(t, "deliveries", time.Minute, func() bool { return rcv.distinct() >= 3 })
	// End the walsender and drop the slot before walcast reconnects.
	waitFor(t, "the slot to be dropped", time.Minute, func() bool {
		db.Exec(context.Background(), `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'walcast_droprun' AND active`)
		_, err := db.Exec(context.Background(), `SELECT pg_drop_replication_slot('walcast_droprun')`)
		return err == nil
	})
	w.waitExit1(t, time.Minute, "its slot was dropped")
	t.Logf("log:\n%s", tail(w.logText(), 3))
	wantAll(t, w.logText(), "the slot was dropped while walcast ran", "the next walcast run refuses to start")
	out, code := walcastOut(t, "run", p, "--plugin-dir", binDir)
	if code != 1 {
		t.Fatalf("restart after the slot was dropped: exit %d, want 1\n%s", code, out)
	}
	wantAll(t, out, "replication slot walcast_droprun does not exist, but pipeline droprun streamed from it before", "--accept-gap")
	if slotCount(t, db, "walcast_droprun") != 0 {
		t.Fatal("the refused restart created a slot")
	}
}

// pgDumpRestore copies database src of cluster from into a new database of
// cluster to (pg_dump -Fc, pg_restore), walcast schema included.
func pgDumpRestore(t *testing.T, from *pgtest.Cluster, srcDSN string, to *pgtest.Cluster) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dump := filepath.Join(from.Dir, "restore_test.dump")
	if out, err := from.Command(ctx, "pg_dump", "-Fc", "-f", dump, "-d", srcDSN).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	dstDSN := to.Database(t)
	if out, err := to.Command(ctx, "pg_restore", "--no-owner", "-d", dstDSN, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
	return dstDSN
}

func TestRestoredIntoAnotherClusterRefusesForeignCheckpoints(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	rcv := newReceiver(t)
	p := writePipeline(t, "moved", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	streamItems(t, db, p, "walcast_moved", rcv, 1, 10)

	// A second cluster: its LSNs start low, far below the checkpoints
	// made on the first one, which would skip every change there.
	other := pgtest.New(t, pgtest.Options{})
	movedDSN := pgDumpRestore(t, cluster, dsn, other)
	mdb := connect(t, movedDSN)
	rcv2 := newReceiver(t)
	p2 := writePipeline(t, "moved", movedDSN, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv2.URL})
	out, code := walcastOut(t, "run", p2, "--plugin-dir", binDir)
	if code != 1 {
		t.Fatalf("walcast run on the restored copy: exit %d, want 1\n%s", code, out)
	}
	var oldSys, newSys string
	db.QueryRow(context.Background(), `SELECT system_identifier::text FROM pg_control_system()`).Scan(&oldSys)
	mdb.QueryRow(context.Background(), `SELECT system_identifier::text FROM pg_control_system()`).Scan(&newSys)
	t.Logf("refusal:\n%s", out)
	wantAll(t, out, "the walcast checkpoints of pipeline moved in this database were made on another cluster or database (system_identifier "+oldSys+", database oid ",
		"this is system_identifier "+newSys, "would skip its changes as already delivered", "last checkpoints: hook ", "--accept-gap")
	if slotCount(t, mdb, "walcast_moved") != 0 {
		t.Fatal("walcast created a slot in the new cluster although it refused")
	}
	status, _ := walcastOut(t, "status", p2)
	wantAll(t, status, "walcast run refuses to start (foreign checkpoints)")

	truthSlot(t, movedDSN, mdb, "truth_moved")
	w := startCapturing(t, mdb, p2, "--accept-gap")
	w.waitLog(t, "streaming from slot")
	insertItems(t, mdb, 100, 10)
	waitFor(t, "deliveries from the new cluster", time.Minute, func() bool { return rcv2.distinct() >= 10 })
	w.stop()
	// Everything committed in the new cluster since then arrived: the old
	// cluster's checkpoints skipped nothing.
	verify(t, truth(t, mdb, "truth_moved", map[string]bool{"public.items": true}), rcv2.events())
	status, _ = walcastOut(t, "status", p2)
	wantAll(t, status, "gap accepted", "(foreign checkpoints): sink hook missed the changes after ")
}

func TestPublicationDroppedWhileRunning(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	truthSlot(t, dsn, db, "truth_pubdrop")
	rcv := newReceiver(t)
	p := writePipeline(t, "pubdrop", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	w := startCapturing(t, db, p)
	w.waitLog(t, "streaming from slot")
	insertItems(t, db, 1, 3)
	waitFor(t, "deliveries", time.Minute, func() bool { return rcv.distinct() >= 3 })
	exec1(t, db, `DROP PUBLICATION walcast_pubdrop`)
	insertItems(t, db, 4, 2)
	w.waitExit1(t, time.Minute, "its publication was dropped")
	t.Logf("log:\n%s", tail(w.logText(), 3))
	wantAll(t, w.logText(), `publication \"walcast_pubdrop\" does not exist`, "publication walcast_pubdrop was dropped while walcast ran",
		"creating it again does not help")

	for range 2 { // no crash loop: every restart says the same and creates nothing
		out, code := walcastOut(t, "run", p, "--plugin-dir", binDir)
		if code != 1 {
			t.Fatalf("restart after the publication was dropped: exit %d, want 1\n%s", code, out)
		}
		t.Logf("refusal:\n%s", out)
		wantAll(t, out, "publication walcast_pubdrop does not exist but replication slot walcast_pubdrop does",
			"creating it again does not help", "--accept-gap")
		if strings.Contains(out, "created publication") {
			t.Fatalf("restart recreated the publication:\n%s", out)
		}
	}
	status, _ := walcastOut(t, "status", p)
	wantAll(t, status, "walcast run refuses to start (publication dropped)")

	streamItems(t, db, p, "walcast_pubdrop", rcv, 10, 3, "--accept-gap")
	want := truth(t, db, "truth_pubdrop", map[string]bool{"public.items": true})
	if got, wantMissing := missingKeys(want, rcv.events()), itemKeys(4, 2); strings.Join(got, " ") != strings.Join(wantMissing, " ") {
		t.Fatalf("changes never delivered: %v, want exactly the ones after the drop %v", got, wantMissing)
	}
	status, _ = walcastOut(t, "status", p)
	wantAll(t, status, "(publication dropped): sink hook missed the changes after ")
}

func TestFailedStartLeavesNoSlot(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	t.Run("missing plugin", func(t *testing.T) {
		p := writePipeline(t, "noslot1", dsn, []string{"public.items"}, sinkSpec{ID: "x", SinkType: "nosuch", Config: " "})
		out := runOnce(t, p, "WALCAST_PLUGIN_DIR="+t.TempDir())
		wantAll(t, out, "walcast-sink-nosuch")
		if n := slotCount(t, db, "walcast_noslot1"); n != 0 {
			t.Fatalf("a start that failed on a missing plugin left %d slot(s)", n)
		}
	})
	t.Run("failure after the slot was created", func(t *testing.T) {
		// The control plane answers the checkpoints but not the pauses,
		// which are read after the slot is created.
		if err := schema.Migrate(context.Background(), db); err != nil {
			t.Fatal(err)
		}
		exec1(t, db, `ALTER TABLE walcast.pauses RENAME COLUMN since TO since_broken`)
		rcv := newReceiver(t)
		p := writePipeline(t, "noslot2", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
		out, code := walcastOut(t, "run", p, "--plugin-dir", binDir)
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s", code, out)
		}
		wantAll(t, out, "created replication slot", "dropped the replication slot this failed start created")
		if n := slotCount(t, db, "walcast_noslot2"); n != 0 {
			t.Fatalf("the failed start left %d slot(s)", n)
		}
		// Nothing was streamed: the next start is a first start, not a gap.
		exec1(t, db, `ALTER TABLE walcast.pauses RENAME COLUMN since_broken TO since`)
		streamItems(t, db, p, "walcast_noslot2", rcv, 1, 2)
	})
}

func TestInvalidatedSlotIsFatalAndExplained(t *testing.T) {
	// 1 MiB WAL segments and a 2 MiB max_slot_wal_keep_size: a few MiB of
	// WAL while a paused sink holds the slot back invalidates it for real.
	own := pgtest.New(t, pgtest.Options{
		InitdbArgs: []string{"--wal-segsize=1"},
		Settings:   []string{"max_slot_wal_keep_size = '2MB'", "min_wal_size = '2MB'", "max_wal_size = '3MB'"},
	})
	dsn := own.DSN("postgres")
	db := connect(t, dsn)
	exec1(t, db, `CREATE TABLE items (id int PRIMARY KEY); CREATE TABLE filler (id int, pad text)`)
	rcv := newReceiver(t)
	p := writePipeline(t, "lostwal", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	streamItems(t, db, p, "walcast_lostwal", rcv, 1, 3)
	if out, code := walcastOut(t, "pause", p); code != 0 {
		t.Fatalf("walcast pause: %d\n%s", code, out)
	}
	w := startWalcast(t, p, "--slot-check-interval", "200ms", "--warn-retained-wal-mb", "1")
	w.waitLog(t, "streaming from slot")
	insertItems(t, db, 4, 3) // held by the paused sink: the slot cannot move
	// Write WAL until the slot is at risk, then past the limit, checkpoint.
	fill := func() {
		exec1(t, db, `INSERT INTO filler SELECT g, repeat(md5(g::text), 20) FROM generate_series(1, 2000) g`)
		exec1(t, db, `SELECT pg_switch_wal()`)
	}
	fill()
	w.waitLog(t, "replication slot at risk of invalidation")
	waitFor(t, "the slot to be invalidated", 2*time.Minute, func() bool {
		fill()
		exec1(t, db, `CHECKPOINT`)
		var status string
		db.QueryRow(context.Background(), `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = 'walcast_lostwal'`).Scan(&status)
		return status == "lost"
	})
	w.waitExit1(t, time.Minute, "its slot was invalidated (retrying on it)")
	log := w.logText()
	t.Logf("log:\n%s", tail(log, 3))
	wantAll(t, log, "replication slot walcast_lostwal is invalidated: PostgreSQL says", "This slot has been invalidated because it exceeded the maximum reserved size", "SQLSTATE 55000")
	if n := countLines(log, "replication stream interrupted; reconnecting"); n > 1 {
		t.Errorf("walcast retried %d times on the invalidated slot", n)
	}
	status, _ := walcastOut(t, "status", p)
	wantAll(t, status, "slot walcast_lostwal: lost (invalidated", "walcast run refuses to start (slot invalidated)")
	out, code := walcastOut(t, "run", p, "--plugin-dir", binDir)
	if code != 1 {
		t.Fatalf("walcast run on an invalidated slot: exit %d, want 1\n%s", code, out)
	}
	t.Logf("refusal:\n%s\nstatus:\n%s", out, status)
	wantAll(t, out, "replication slot walcast_lostwal was invalidated (wal_status lost)", "last checkpoints: hook ", "--accept-gap")

	if out, code := walcastOut(t, "resume", p); code != 0 {
		t.Fatalf("walcast resume: %d\n%s", code, out)
	}
	streamItems(t, db, p, "walcast_lostwal", rcv, 10, 2, "--accept-gap")
	status, _ = walcastOut(t, "status", p)
	wantAll(t, status, "(slot invalidated): sink hook missed the changes after ")
}

// TestGroupStopIsClean stops walcast the way service managers and shells
// do, with SIGTERM to every process at once, while a slow receiver holds
// batches in flight: it must stop exactly as after a SIGTERM to walcast
// alone (batches in flight finish, final checkpoints, exit 0, no plugin
// restart), so that the next start redelivers nothing.
func TestGroupStopIsClean(t *testing.T) {
	for _, how := range []string{"process group", "every process"} {
		t.Run(how, func(t *testing.T) {
			dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
			truthSlot(t, dsn, db, "truth_groupstop")
			rcv := newReceiver(t)
			rcv.delay = 700 * time.Millisecond
			p := writePipeline(t, "groupstop", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 10})
			w := startWalcastAttr(t, &syscall.SysProcAttr{Setpgid: true}, p)
			waitSlot(t, db, "walcast_groupstop")
			w.waitLog(t, "streaming from slot")
			insertItems(t, db, 1, 300)
			waitFor(t, "a few batches delivered", time.Minute, func() bool { return rcv.count() >= 20 })
			pid := w.cmd.Process.Pid
			switch how {
			case "process group":
				// kill -- -PGID, timeout(1), Ctrl-C in a terminal.
				if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			case "every process":
				// systemd's default KillMode=control-group signals every
				// process of the service's cgroup, whatever its group.
				for _, c := range childPIDs(pid) {
					syscall.Kill(c, syscall.SIGTERM)
				}
				syscall.Kill(pid, syscall.SIGTERM)
			}
			select {
			case <-w.exited:
				if w.err != nil {
					t.Fatalf("walcast exited with %v after the group SIGTERM, want 0", w.err)
				}
			case <-time.After(time.Minute):
				t.Fatal("walcast did not stop")
			}
			log := w.logText()
			for _, bad := range []string{"restarting sink plugin", "plugin exited", "sink failed", "level=ERROR"} {
				if strings.Contains(log, bad) {
					t.Errorf("group stop logged %q:\n%s", bad, tail(log, 30))
				}
			}
			stopped := rcv.count()
			w2 := startWalcast(t, p)
			w2.waitLog(t, "streaming from slot")
			waitFor(t, "every change", 2*time.Minute, func() bool { return rcv.distinct() >= 300 })
			w2.stop()
			dups := verify(t, truth(t, db, "truth_groupstop", map[string]bool{"public.items": true}), rcv.events())
			t.Logf("delivered %d before the stop, %d duplicates after the restart", stopped, dups)
			if dups != 0 {
				t.Fatalf("%d events delivered twice after a group stop", dups)
			}
		})
	}
}

// TestSystemdUnitExample keeps examples/systemd/walcast@.service in step
// with walcast run: its command line parses, and it stops walcast with a
// SIGTERM to walcast alone (TestGroupStopIsClean covers the default
// control-group stop too).
func TestSystemdUnitExample(t *testing.T) {
	b, err := os.ReadFile("../../examples/systemd/walcast@.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	wantAll(t, unit, "\nKillMode=mixed\n", "\nKillSignal=SIGTERM\n", "\nTimeoutStopSec=")
	m := regexp.MustCompile(`(?m)^ExecStart=(\S+) (.*)$`).FindStringSubmatch(unit)
	if m == nil || filepath.Base(m[1]) != "walcast" {
		t.Fatalf("no ExecStart running walcast in the unit:\n%s", unit)
	}
	args := strings.Fields(strings.ReplaceAll(m[2], "%i", "nosuchpipeline"))
	if args[0] != "run" {
		t.Fatalf("ExecStart runs walcast %s, want run", args[0])
	}
	// A missing pipeline file is a config error (exit 1); an unknown
	// flag would be a usage error (exit 2).
	out, code := walcastOut(t, args...)
	if code != 1 || !strings.Contains(out, "nosuchpipeline.hcl") {
		t.Fatalf("walcast %s: exit %d, want 1 on the missing file\n%s", strings.Join(args, " "), code, out)
	}
}

// TestSlotRecreatedOrAdvancedByHandRefuses: while walcast is stopped, the
// slot is dropped and created again under the same name (or advanced with
// pg_replication_slot_advance) after changes were committed. The slot
// exists and looks healthy, but it starts past changes no sink received:
// walcast must refuse, not stream on over the hole.
func TestSlotRecreatedOrAdvancedByHandRefuses(t *testing.T) {
	for _, c := range []struct{ name, move string }{
		{"recreated", `SELECT pg_drop_replication_slot('walcast_%[1]s'), pg_create_logical_replication_slot('walcast_%[1]s', 'pgoutput')`},
		{"advanced", `SELECT pg_replication_slot_advance('walcast_%[1]s', pg_current_wal_lsn())`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
			truthSlot(t, dsn, db, "truth_"+c.name)
			rcv := newReceiver(t)
			p := writePipeline(t, c.name, dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
			streamItems(t, db, p, "walcast_"+c.name, rcv, 1, 10)

			insertItems(t, db, 11, 5) // committed while walcast is stopped
			exec1(t, db, fmt.Sprintf(c.move, c.name))

			stdout, stderr, code := walcastTimed(t, time.Minute, nil, "run", p, "--plugin-dir", binDir)
			out := stdout + stderr
			if code != 1 {
				t.Fatalf("walcast run with its slot %s by hand: exit %d (-1: still running after a minute), want 1; output:\n%s", c.name, code, out)
			}
			t.Logf("refusal:\n%s", out)
			wantAll(t, out, "replication slot walcast_"+c.name+" is confirmed up to", "the furthest position walcast ever confirmed to it",
				"last checkpoints: hook ", "--accept-gap")
			if rcv.distinct() != 10 {
				t.Fatalf("the receiver got %d rows, want the 10 streamed before", rcv.distinct())
			}
			status, _ := walcastOut(t, "status", p)
			wantAll(t, status, "walcast run refuses to start (slot moved)")

			// Accepting the gap streams on; exactly the five changes the
			// moved slot skipped are missing, as test_decoding says.
			streamItems(t, db, p, "walcast_"+c.name, rcv, 16, 5, "--accept-gap")
			status, _ = walcastOut(t, "status", p)
			wantAll(t, status, "gap accepted", "(slot moved): sink hook missed the changes after")
			want := truth(t, db, "truth_"+c.name, map[string]bool{"public.items": true})
			if got, wantMissing := missingKeys(want, rcv.events()), itemKeys(11, 5); strings.Join(got, " ") != strings.Join(wantMissing, " ") {
				t.Fatalf("changes never delivered: %v, want exactly the skipped %v", got, wantMissing)
			}
			streamItems(t, db, p, "walcast_"+c.name, rcv, 21, 3)
		})
	}
}

// TestTableRemovedFromPublicationRefuses: a table is removed from the
// pipeline's publication by hand (and, in one case, added back) while
// walcast is stopped, or while it runs. PostgreSQL decodes each change
// with the publication as it was then, so the changes committed meanwhile
// are gone from the stream: walcast must stop and say so, not re-add the
// table and go on.
func TestTableRemovedFromPublicationRefuses(t *testing.T) {
	for _, c := range []struct {
		name    string
		running bool
		readd   bool
		want    string
	}{
		{"stopped", false, false, "no longer published by publication walcast_pubstopped"},
		{"readded", false, true, "published differently since walcast last checked it"},
		{"running", true, false, "no longer published by publication walcast_pubrunning (removed by hand while walcast ran"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "pub" + c.name
			dsn, db := newSource(t,
				`CREATE TABLE items (id int PRIMARY KEY)`,
				`CREATE TABLE other (id int PRIMARY KEY)`,
			)
			truthSlot(t, dsn, db, "truth_"+name)
			rcv := newReceiver(t)
			p := writePipeline(t, name, dsn, []string{"public.items", "public.other"}, sinkSpec{ID: "hook", URL: rcv.URL})
			streamItems(t, db, p, "walcast_"+name, rcv, 1, 10)

			var out string
			if c.running {
				w := startWalcast(t, p, "--slot-check-interval", "200ms")
				w.waitLog(t, "streaming from slot")
				exec1(t, db, `ALTER PUBLICATION walcast_`+name+` DROP TABLE items`)
				insertItems(t, db, 11, 5) // never decoded
				w.waitExit1(t, time.Minute, "a table was removed from its publication")
				out = w.logText()
			} else {
				exec1(t, db, `ALTER PUBLICATION walcast_`+name+` DROP TABLE items`)
				insertItems(t, db, 11, 5) // never decoded
				if c.readd {
					exec1(t, db, `ALTER PUBLICATION walcast_`+name+` ADD TABLE items`)
				}
				stdout, stderr, code := walcastTimed(t, time.Minute, nil, "run", p, "--plugin-dir", binDir)
				out = stdout + stderr
				if code != 1 {
					t.Fatalf("walcast run after items was removed from its publication: exit %d (-1: still running after a minute), want 1; output:\n%s", code, out)
				}
			}
			t.Logf("refusal:\n%s", out)
			wantAll(t, out, "table public.items is "+c.want, "publishing it again does not bring them back", "--accept-gap")
			if rcv.distinct() != 10 {
				t.Fatalf("the receiver got %d rows, want the 10 streamed before", rcv.distinct())
			}
			// Every later start refuses too (walcast does not quietly put
			// the table back), and status says why.
			stdout, stderr, code := walcastTimed(t, time.Minute, nil, "run", p, "--plugin-dir", binDir)
			if code != 1 || !strings.Contains(stdout+stderr, "table public.items is ") {
				t.Fatalf("second start: exit %d, want the same refusal; output:\n%s", code, stdout+stderr)
			}
			status, _ := walcastOut(t, "status", p)
			wantAll(t, status, "walcast run refuses to start (publication changed)")

			// Accepting the gap keeps the slot and publishes items again:
			// exactly the five changes made while it was unpublished are
			// missing, as test_decoding says, and later ones arrive.
			streamItems(t, db, p, "walcast_"+name, rcv, 16, 5, "--accept-gap")
			status, _ = walcastOut(t, "status", p)
			wantAll(t, status, "gap accepted", "(publication changed: public.items): sink hook missed the changes after")
			want := truth(t, db, "truth_"+name, map[string]bool{"public.items": true})
			if got, wantMissing := missingKeys(want, rcv.events()), itemKeys(11, 5); strings.Join(got, " ") != strings.Join(wantMissing, " ") {
				t.Fatalf("changes never delivered: %v, want exactly the unpublished %v", got, wantMissing)
			}
			streamItems(t, db, p, "walcast_"+name, rcv, 21, 3)
		})
	}
}
