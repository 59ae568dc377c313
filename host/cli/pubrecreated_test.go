package cli

import (
	"strings"
	"testing"
	"time"
)

// TestPublicationRecreatedWhileStopped: the pipeline's publication is
// dropped and created again by hand while walcast is stopped, rows
// inserted in between. The slot cannot decode with the new publication
// (PostgreSQL looks it up as of each change, before it existed), so the
// default start refuses, naming what happened and the ways out, every
// time, creating nothing; walcast status says why. --accept-gap replaces
// the slot and records the gap: exactly the rows of the gap are missing,
// as test_decoding says, and later changes arrive.
func TestPublicationRecreatedWhileStopped(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	truthSlot(t, dsn, db, "truth_pubrecreate")
	rcv := newReceiver(t)
	p := writePipeline(t, "pubrecreate", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	streamItems(t, db, p, "walcast_pubrecreate", rcv, 1, 10)

	exec1(t, db, `DROP PUBLICATION walcast_pubrecreate`)
	insertItems(t, db, 11, 5) // in no publication: never decoded
	exec1(t, db, `CREATE PUBLICATION walcast_pubrecreate FOR TABLE items`)

	for range 2 { // every start says the same and creates nothing
		stdout, stderr, code := walcastTimed(t, time.Minute, nil, "run", p, "--plugin-dir", binDir)
		out := stdout + stderr
		if code != 1 {
			t.Fatalf("walcast run after the publication was recreated: exit %d (-1: still running after a minute), want 1; output:\n%s", code, out)
		}
		t.Logf("refusal:\n%s", out)
		wantAll(t, out, "publication walcast_pubrecreate is not the one replication slot walcast_pubrecreate streams with",
			"dropped (DROP PUBLICATION) and created again", "would fail with", "publication walcast_pubrecreate does not exist",
			"the changes of every table of pipeline pubrecreate", "--accept-gap", "drops the slot, creates a new one", "on_gap = ")
	}
	if rcv.distinct() != 10 {
		t.Fatalf("the receiver got %d rows, want the 10 streamed before", rcv.distinct())
	}
	status, _ := walcastOut(t, "status", p)
	wantAll(t, status, "walcast run refuses to start (publication recreated)")

	streamItems(t, db, p, "walcast_pubrecreate", rcv, 16, 5, "--accept-gap")
	status, _ = walcastOut(t, "status", p)
	wantAll(t, status, "gap accepted", "(publication recreated): sink hook missed the changes after")
	want := truth(t, db, "truth_pubrecreate", map[string]bool{"public.items": true})
	if got, wantMissing := missingKeys(want, rcv.events()), itemKeys(11, 5); strings.Join(got, " ") != strings.Join(wantMissing, " ") {
		t.Fatalf("changes never delivered: %v, want exactly the ones of the gap %v", got, wantMissing)
	}
	// The start after the accepted one streams on without a word of a gap.
	streamItems(t, db, p, "walcast_pubrecreate", rcv, 21, 3)
}

// TestPublicationRecreatedWhileRunning: the pipeline's publication is
// dropped and created again by hand while walcast streams. The running
// walcast stops at once (exit 1) naming what happened — re-created, the
// gap's kind, and the ways out (--accept-gap, on_gap = "resync") — rather
// than a generic "dropped" or "published differently", in both ways it
// finds out: the stream fails on a change decoded between the DROP and
// the CREATE (here in the same transaction, so the publication exists
// again when the failure is explained), or the watch of the publication
// (every --slot-check-interval) sees its tables lost, or published by a
// new oid; whichever comes first.
func TestPublicationRecreatedWhileRunning(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	rcv := newReceiver(t)
	p := writePipeline(t, "pubrerun", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	want := []string{"publication walcast_pubrerun was dropped (DROP PUBLICATION) and re-created while walcast ran",
		`gap "publication recreated"`, "--accept-gap", `on_gap = "resync"`}

	w := startCapturing(t, db, p, "--slot-check-interval=200ms")
	w.waitLog(t, "streaming from slot")
	insertItems(t, db, 1, 3)
	waitFor(t, "deliveries", time.Minute, func() bool { return rcv.distinct() >= 3 })
	exec1(t, db, `BEGIN; DROP PUBLICATION walcast_pubrerun; INSERT INTO items VALUES (4);
		CREATE PUBLICATION walcast_pubrerun FOR TABLE items WITH (publish_via_partition_root = true); COMMIT`)
	w.waitExit1(t, time.Minute, "its publication was re-created with a change in between")
	if strings.Contains(w.logText(), "no longer published") || strings.Contains(w.logText(), "published differently") {
		t.Errorf("the re-created publication was called a changed one:\n%s", tail(w.logText(), 3))
	}
	t.Logf("stream: %s", tail(w.logText(), 1))
	wantAll(t, w.logText(), want...)

	streamItems(t, db, p, "walcast_pubrerun", rcv, 10, 3, "--accept-gap")
	w = startCapturing(t, db, p, "--slot-check-interval=200ms")
	w.waitLog(t, "streaming from slot")
	exec1(t, db, `BEGIN; DROP PUBLICATION walcast_pubrerun;
		CREATE PUBLICATION walcast_pubrerun FOR TABLE items WITH (publish_via_partition_root = true); COMMIT`)
	w.waitExit1(t, time.Minute, "its publication was re-created")
	t.Logf("watch: %s", tail(w.logText(), 1))
	wantAll(t, w.logText(), want...)
	if strings.Contains(w.logText(), "published differently") {
		t.Errorf("the watch called the re-created publication a changed one:\n%s", tail(w.logText(), 3))
	}
}
