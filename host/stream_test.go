package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// setup makes a fresh database with table items and returns its DSN and a
// connection to it.
func setup(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	dsn := cluster.Database(t)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	execT(t, db, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	return dsn, db
}

func execT(t *testing.T, db *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func open(t *testing.T, dsn, slot string, tables ...string) *host.Stream {
	t.Helper()
	if len(tables) == 0 {
		tables = []string{"public.items"}
	}
	return openConfig(t, host.StreamConfig{DSN: dsn, Tables: tables, Slot: slot})
}

// slots numbers slot names: slots belong to the cluster, not to a test's
// database, and a name must stay unique when tests run again (-count).
var slots atomic.Int64

// slotName returns a slot name starting with base, unique in this process.
func slotName(base string) string { return fmt.Sprintf("%s_%d", base, slots.Add(1)) }

func openConfig(t *testing.T, cfg host.StreamConfig) *host.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := host.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func next(t *testing.T, s *host.Stream) host.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return ev
}

func ack(t *testing.T, s *host.Stream, id cdc.EventID) {
	t.Helper()
	if err := s.Ack(id); err != nil {
		t.Fatal(err)
	}
}

// confirmed is the slot's confirmed_flush_lsn.
func confirmed(t *testing.T, db *pgx.Conn, slot string) uint64 {
	t.Helper()
	var s string
	if err := db.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s); err != nil {
		t.Fatalf("read confirmed_flush_lsn of %s: %v", slot, err)
	}
	lsn, err := cdc.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestEventFields(t *testing.T) {
	dsn, db := setup(t)
	slot := slotName("fields")
	execT(t, db, `CREATE TABLE docs (id int PRIMARY KEY, title text, body text)`)
	s := open(t, dsn, slot, "public.docs")
	big := strings.Repeat("lorem ipsum ", 10000) // TOASTed, stored out of line
	execT(t, db, `ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL`)
	execT(t, db, `INSERT INTO docs VALUES (1, 'a', $1)`, big)
	execT(t, db, `UPDATE docs SET title = 'b' WHERE id = 1`)
	execT(t, db, `UPDATE docs SET id = 2 WHERE id = 1`)
	execT(t, db, `DELETE FROM docs WHERE id = 2`)
	execT(t, db, `TRUNCATE docs RESTART IDENTITY`)

	ins := next(t, s)
	var row struct {
		ID    int
		Title string
		Body  string
	}
	if err := json.Unmarshal(ins.New, &row); err != nil {
		t.Fatal(err)
	}
	if ins.Op != cdc.OpInsert || ins.Schema != "public" || ins.Table != "docs" || string(ins.Key) != `{"id":1}` ||
		row.Body != big || ins.Old != nil || ins.XID == 0 || time.Since(ins.CommitTime) > time.Minute {
		t.Errorf("insert: %+v", ins)
	}
	var env map[string]any
	if err := json.Unmarshal(ins.JSON(), &env); err != nil || env["id"] != ins.ID.String() || env["op"] != "insert" {
		t.Errorf("insert envelope %v (%v)", env, err)
	}

	upd := next(t, s)
	if upd.Op != cdc.OpUpdate || string(upd.New) != `{"id":1,"title":"b"}` || len(upd.Unchanged) != 1 || upd.Unchanged[0] != "body" || upd.Old != nil {
		t.Errorf("update with unchanged TOAST: new %s old %s unchanged %v", upd.New, upd.Old, upd.Unchanged)
	}
	key := next(t, s)
	if string(key.Key) != `{"id":2}` || string(key.Old) != `{"id":1}` {
		t.Errorf("key change: key %s old %s", key.Key, key.Old)
	}
	del := next(t, s)
	if del.Op != cdc.OpDelete || del.New != nil || string(del.Old) != `{"id":2}` || string(del.Key) != `{"id":2}` {
		t.Errorf("delete: key %s new %s old %s", del.Key, del.New, del.Old)
	}
	tr := next(t, s)
	if tr.Op != cdc.OpTruncate || tr.Key != nil || tr.New != nil || tr.Old != nil || !tr.RestartIdentity || tr.Cascade {
		t.Errorf("truncate: %+v", tr)
	}
	ack(t, s, tr.ID)
}

// Acking a transaction's last event releases it; the slot moves within a
// status update without Close.
func TestAckReleasesTransaction(t *testing.T) {
	dsn, db := setup(t)
	slot := slotName("release")
	s := open(t, dsn, slot)
	execT(t, db, `INSERT INTO items SELECT g, 'a' FROM generate_series(1, 3) g`)
	execT(t, db, `INSERT INTO items SELECT g, 'b' FROM generate_series(4, 5) g`)
	var a, b []host.Event
	for range 3 {
		a = append(a, next(t, s))
	}
	b = append(b, next(t, s))
	ack(t, s, a[1].ID) // releases nothing yet (see TestPartialAckReplaysWholeTransaction)
	ack(t, s, a[2].ID)
	waitFor(t, "the first transaction to be confirmed", 10*time.Second, func() bool {
		return confirmed(t, db, slot) > a[0].ID.CommitLSN
	})
	if got := confirmed(t, db, slot); got >= b[0].ID.CommitLSN {
		t.Fatalf("slot at %s passed the unacked second transaction (commit %s)", cdc.FormatLSN(got), cdc.FormatLSN(b[0].ID.CommitLSN))
	}
}

func TestAckValidation(t *testing.T) {
	dsn, db := setup(t)
	slot := slotName("validation")
	s := open(t, dsn, slot)
	execT(t, db, `INSERT INTO items SELECT g, 'a' FROM generate_series(1, 3) g`)
	execT(t, db, `INSERT INTO items SELECT g, 'b' FROM generate_series(4, 5) g`)
	a0, a1, a2, b0 := next(t, s), next(t, s), next(t, s), next(t, s)

	for name, id := range map[string]cdc.EventID{
		"zero id":                    {},
		"not yet returned":           {CommitLSN: b0.ID.CommitLSN, Index: 1},
		"beyond its transaction":     {CommitLSN: a0.ID.CommitLSN, Index: 3},
		"between two transactions":   {CommitLSN: a0.ID.CommitLSN + 1},
		"before the first delivered": {CommitLSN: a0.ID.CommitLSN - 1, Index: 7},
	} {
		if err := s.Ack(id); !errors.Is(err, host.ErrInvalidAck) {
			t.Errorf("%s: Ack(%s) = %v, want ErrInvalidAck", name, id, err)
		}
	}
	ack(t, s, a1.ID)
	ack(t, s, a1.ID) // the same id again is fine
	if err := s.Ack(a0.ID); !errors.Is(err, host.ErrInvalidAck) {
		t.Errorf("Ack lower than an earlier ack = %v, want ErrInvalidAck", err)
	}
	ack(t, s, a2.ID)
	ack(t, s, b0.ID)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next with a cancelled context = %v", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(context.Background()); !errors.Is(err, host.ErrClosed) {
		t.Errorf("Next after Close = %v, want ErrClosed", err)
	}
	if err := s.Ack(b0.ID); !errors.Is(err, host.ErrClosed) {
		t.Errorf("Ack after Close = %v, want ErrClosed", err)
	}
}

// Acking in the middle of a large transaction releases none of it: a new
// stream delivers all of it again, with identical ids.
func TestPartialAckReplaysWholeTransaction(t *testing.T) {
	const rows = 10000
	dsn, db := setup(t)
	slot := slotName("partial")
	s := open(t, dsn, slot)
	execT(t, db, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, $1::int) g`, rows)
	var first []cdc.EventID
	for range rows / 2 {
		ev := next(t, s)
		first = append(first, ev.ID)
		ack(t, s, ev.ID)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The slot may have moved over WAL written before the transaction,
	// never to its commit.
	if got := confirmed(t, db, slot); got >= first[0].CommitLSN {
		t.Fatalf("slot at %s although transaction %s was only half acked", cdc.FormatLSN(got), cdc.FormatLSN(first[0].CommitLSN))
	}

	s = open(t, dsn, slot)
	for i := range rows {
		ev := next(t, s)
		want := cdc.EventID{CommitLSN: first[0].CommitLSN, Index: uint64(i)}
		if i < len(first) {
			want = first[i]
		}
		if ev.ID != want {
			t.Fatalf("event %d after reopening has id %s, want %s", i, ev.ID, want)
		}
	}
}

// Crash: a consumer process acks up to a known id and is SIGKILLed. A new
// stream on the slot starts at the first unreleased transaction — the
// acked one again if the ack stopped inside it — and misses nothing.
func TestCrashReplaysFromLastReleasedTransaction(t *testing.T) {
	const txns, perTx = 20, 5
	for _, tc := range []struct {
		name  string
		slot  string
		ackAt int // the consumer acks its ackAt-th event
	}{
		{"ack inside a transaction", "crash_inside", 7*perTx + 2},
		{"ack at a transaction's end", "crash_end", 8 * perTx},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, db := setup(t)
			slot := slotName(tc.slot)
			c := startChild(t, "crash", "CHILD_DSN="+dsn, "CHILD_TABLE=public.items", "CHILD_SLOT="+slot, "CHILD_ACK_AT="+strconv.Itoa(tc.ackAt))
			c.expect(t, "ready", time.Minute)
			for tx := range txns {
				execT(t, db, `INSERT INTO items SELECT g, 'x' FROM generate_series($1::int, $2::int) g`, tx*perTx, tx*perTx+perTx-1)
			}
			var ids []cdc.EventID
			var acked cdc.EventID
			for len(ids) < txns*perTx || acked.IsZero() {
				line := c.expect(t, "", 30*time.Second)
				kind, arg, _ := strings.Cut(line, " ")
				id, err := cdc.ParseEventID(arg)
				if err != nil {
					t.Fatalf("consumer said %q: %v", line, err)
				}
				switch kind {
				case "event":
					ids = append(ids, id)
				case "acked":
					acked = id
				}
			}
			if acked != ids[tc.ackAt-1] {
				t.Fatalf("consumer acked %s, want %s", acked, ids[tc.ackAt-1])
			}
			// The rule: transactions whose last event is at or below the
			// ack are released; the replay starts at the first other one.
			replayFrom := tc.ackAt
			for replayFrom > 0 && ids[replayFrom-1].CommitLSN == acked.CommitLSN && acked.Index != perTx-1 {
				replayFrom--
			}
			lastReleased := ids[replayFrom-1].CommitLSN
			// Kill only once the release reached PostgreSQL, so the check
			// below is exact rather than "at least".
			waitFor(t, "the released position to be confirmed", 10*time.Second, func() bool {
				return confirmed(t, db, slot) > lastReleased
			})
			c.kill(t)
			if got := confirmed(t, db, slot); got >= ids[replayFrom].CommitLSN {
				t.Fatalf("slot at %s passed the first unreleased transaction %s", cdc.FormatLSN(got), ids[replayFrom])
			}

			s := open(t, dsn, slot)
			for i := replayFrom; i < len(ids); i++ {
				if ev := next(t, s); ev.ID != ids[i] {
					t.Fatalf("replayed event %d is %s, want %s", i, ev.ID, ids[i])
				}
			}
			// Nothing else is pending: the next event is a new change.
			execT(t, db, `INSERT INTO items VALUES (-1, 'marker')`)
			if ev := next(t, s); string(ev.Key) != `{"id":-1}` {
				t.Fatalf("after the replay got %s (%s), want the marker row", ev.ID, ev.Key)
			}
			t.Logf("acked %s; replay started at %s (%d of %d events delivered again)", acked, ids[replayFrom], len(ids)-replayFrom, len(ids))
		})
	}
}

// A 200,000-row transaction streams through a consumer process in bounded
// memory; the figure is the process's peak RSS (VmHWM).
func TestLargeTransactionMemory(t *testing.T) {
	const rows = 200_000
	const limitMB = 150
	dsn, db := setup(t)
	c := startChild(t, "rss", "CHILD_DSN="+dsn, "CHILD_TABLE=public.items", "CHILD_SLOT="+slotName("rss"), "CHILD_COUNT="+strconv.Itoa(rows))
	c.expect(t, "ready", time.Minute)
	started := time.Now()
	execT(t, db, `INSERT INTO items SELECT g, repeat('x', 200) FROM generate_series(1, $1::int) g`, rows)
	committed := time.Since(started)
	done := c.expect(t, "done", 5*time.Minute)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	c.stdin.Close()
	var hwmKB int
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			hwmKB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	if hwmKB == 0 {
		t.Fatalf("no VmHWM in /proc/<pid>/status:\n%s", status)
	}
	t.Logf("%d-row transaction: insert took %s; consumer read and acked it (%s); peak RSS %.1f MB", rows, committed.Round(time.Millisecond), done, float64(hwmKB)/1024)
	if hwmKB > limitMB*1024 {
		t.Fatalf("peak RSS %.1f MB, limit %d MB", float64(hwmKB)/1024, limitMB)
	}
	<-c.done
	if c.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("consumer exited with %s", c.cmd.ProcessState)
	}
}

// After PostgreSQL restarts, capture reconnects and the server resends
// everything after the slot's confirmed position; the stream skips what it
// already handed over, so Next neither repeats nor loses an event.
func TestReconnectSkipsResent(t *testing.T) {
	own := pgtest.New(t, pgtest.Options{})
	ctx := context.Background()
	dsn, err := own.CreateDatabase(ctx, "reconnect")
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	execT(t, db, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	s := open(t, dsn, "reconnect")
	for tx := range 4 {
		execT(t, db, `INSERT INTO items SELECT g, 'x' FROM generate_series($1::int, $2::int) g`, tx*10, tx*10+9)
	}
	db.Close(ctx)
	var ids []cdc.EventID
	for range 15 { // the first transaction acked, the second half read
		ev := next(t, s)
		ids = append(ids, ev.ID)
		if len(ids) == 10 {
			ack(t, s, ev.ID)
		}
	}
	// "immediate" (a crash): a fast shutdown would wait for the walsender
	// to see everything it sent confirmed, which an unacked consumer never
	// does. The crash also rolls the slot back to its last saved position.
	if err := own.Restart(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	db, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	execT(t, db, `INSERT INTO items SELECT g, 'x' FROM generate_series(40, 49) g`)
	for len(ids) < 50 {
		ev := next(t, s)
		if last := ids[len(ids)-1]; ev.ID.Compare(last) <= 0 {
			t.Fatalf("after the reconnect Next returned %s again (last was %s)", ev.ID, last)
		}
		ids = append(ids, ev.ID)
		ack(t, s, ev.ID)
	}
	for tx := range 5 {
		for i := range 10 {
			if id := ids[tx*10+i]; id.Index != uint64(i) || id.CommitLSN != ids[tx*10].CommitLSN {
				t.Fatalf("event %d of transaction %d has id %s", i, tx, id)
			}
		}
	}
}

// A consumer that stops reading must not get the replication connection
// cut: while the buffer is full, capture keeps answering the server, and
// the time it waits for the consumer is not silence. The test cluster's
// wal_sender_timeout is 5s, the receive timeout 2s; the consumer stalls
// for 7s.
func TestStalledConsumerKeepsConnection(t *testing.T) {
	dsn, db := setup(t)
	slot := slotName("stalled")
	s := openConfig(t, host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: slot, Buffer: 2, ReceiveTimeout: 2 * time.Second})
	execT(t, db, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 100) g`)
	walsender := func() (pid int) {
		db.QueryRow(context.Background(), `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active`, slot).Scan(&pid)
		return pid
	}
	waitFor(t, "the slot to be streamed", 10*time.Second, func() bool { return walsender() != 0 })
	pid := walsender()
	stallUntil := time.Now().Add(7 * time.Second)
	for time.Now().Before(stallUntil) {
		if got := walsender(); got != pid {
			t.Fatalf("walsender changed from %d to %d while the consumer stalled: the connection was cut", pid, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := range 100 {
		ev := next(t, s)
		if ev.ID.Index != uint64(i) {
			t.Fatalf("event %d has id %s", i, ev.ID)
		}
		ack(t, s, ev.ID)
	}
	if got := walsender(); got != pid {
		t.Fatalf("walsender changed from %d to %d: the connection was cut", pid, got)
	}
	if n := s.ReceiveTimeouts(); n != 0 {
		t.Fatalf("the stream was ended %d times for silence while the consumer stalled", n)
	}
}

func TestOpenRefuses(t *testing.T) {
	dsn, db := setup(t)
	execT(t, db, `DO $$ BEGIN CREATE ROLE norep LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
	norep := strings.Replace(dsn, "postgres://postgres@", "postgres://norep@", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		cfg  host.StreamConfig
		want string
	}{
		{host.StreamConfig{Tables: []string{"public.items"}, Slot: "s"}, "DSN is empty"},
		{host.StreamConfig{DSN: dsn, Slot: "s"}, "Tables is empty"},
		{host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}}, `Slot "" is empty`},
		{host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: "Bad-Name"}, "lower-case letters"},
		{host.StreamConfig{DSN: dsn, Tables: []string{"public.nope"}, Slot: "refuse"}, "does not exist"},
		{host.StreamConfig{DSN: norep, Tables: []string{"public.items"}, Slot: "refuse"}, "REPLICATION attribute"},
		{host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: "refuse", Format: "avro"}, `Format is "avro"`},
		{host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: "refuse", Format: "debezium",
			Debezium: host.Debezium{DecimalHandlingMode: "exact"}}, `DecimalHandlingMode is "exact"`},
	} {
		s, err := host.Open(ctx, tc.cfg)
		if err == nil {
			s.Close(context.Background())
			t.Errorf("Open(%+v) succeeded, want an error mentioning %q", tc.cfg, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v) = %v, want an error mentioning %q", tc.cfg, err, tc.want)
		}
	}
}

// TestTableUnpublishedEndsTheStream: a table removed from the stream's
// publication by hand while it streams ends Next with the reason (its
// changes since are gone from the slot), and the next Open refuses until
// AcceptGap.
func TestTableUnpublishedEndsTheStream(t *testing.T) {
	dsn, db := setup(t)
	slot := slotName("unpub")
	s := open(t, dsn, slot)
	execT(t, db, `INSERT INTO items VALUES (1, 'a')`)
	ack(t, s, next(t, s).ID)
	execT(t, db, `ALTER PUBLICATION `+slot+` DROP TABLE items`)
	execT(t, db, `INSERT INTO items VALUES (2, 'lost')`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The table is still there, only unpublished: no drop_table schema
	// event (a consumer would throw its copy away), only the end.
	ev, err := s.Next(ctx)
	if err == nil && ev.Op == "schema" {
		t.Errorf("a table removed from the publication but not dropped got a schema event: %s", ev.JSON())
		ack(t, s, ev.ID)
		ev, err = s.Next(ctx)
	}
	if err == nil || !strings.Contains(err.Error(), "table public.items is no longer published by publication "+slot) {
		t.Fatalf("Next after the table left the publication = %+v, %v; want the stream to end saying so", ev, err)
	}
	s.Close(context.Background())
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if s2, err := host.Open(ctx2, host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: slot}); err == nil {
		s2.Close(context.Background())
		t.Fatal("Open after the table left the publication succeeded, want a refusal")
	}
	s3 := openConfig(t, host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: slot, AcceptGap: true})
	execT(t, db, `INSERT INTO items VALUES (3, 'after')`)
	if ev := next(t, s3); !strings.Contains(string(ev.JSON()), `"id":3`) {
		t.Fatalf("first event after accepting the gap: %s, want row 3", ev.JSON())
	}
}
