package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/pluginkit"
)

// The source database of a test: connections to it, its replication
// slots, what walcast keeps in it (walcast.parked), and workloads to
// commit. Each test makes its own database (cluster.Database); slots are
// cluster-wide, so a test drops the ones it made.

func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec1(t testing.TB, db *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// queryInt runs a query of one integer (a count) and returns it.
func queryInt(t testing.TB, db *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func lsnQuery(t testing.TB, db *pgx.Conn, sql string, args ...any) uint64 {
	t.Helper()
	var s *string
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return 0
	}
	v, err := pluginkit.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func confirmedFlush(t testing.TB, db *pgx.Conn, slot string) uint64 {
	return lsnQuery(t, db, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot)
}

// waitSlot waits until walcast has created its slot: changes committed
// before that are not captured, by design.
func waitSlot(t testing.TB, db *pgx.Conn, slot string) {
	t.Helper()
	// A slot is listed as soon as its creation starts, but it decodes
	// only what commits after its consistent point, which it reaches once
	// the transactions running at creation end (on a busy shared cluster,
	// seconds later). confirmed_flush_lsn stays null until then.
	waitFor(t, "slot "+slot+" consistent", 60*time.Second, func() bool {
		var n int
		db.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND confirmed_flush_lsn IS NOT NULL`, slot).Scan(&n)
		return n == 1
	})
}

// waitSlotReleased waits until no walsender holds slot (or it is gone):
// the walsender lets go a moment after walcast exits, and dropping or
// advancing the slot before then fails with "is active for PID".
func waitSlotReleased(t testing.TB, db *pgx.Conn, slot string) {
	t.Helper()
	waitFor(t, "slot "+slot+" released", time.Minute, func() bool {
		var active bool
		err := db.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		return err != nil || !active
	})
}

func slotCount(t *testing.T, db *pgx.Conn, slot string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// catchupSlots lists the slots that exist named like a catch-up slot of
// the pipeline whose slot is main.
func catchupSlots(t testing.TB, db *pgx.Conn, main string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT slot_name::text FROM pg_replication_slots`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if isolate.IsCatchupSlot(main, n) {
			out = append(out, n)
		}
	}
	return out
}

// dropSlot drops a replication slot, waiting a little for its walsender to
// notice that walcast is gone. Errors are ignored: the slot may never have
// been created, or its cluster may be gone.
func dropSlot(dsn, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	for ctx.Err() == nil {
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func parkedCount(db *pgx.Conn, pipeline string) int {
	var n int
	db.QueryRow(context.Background(), `SELECT count(*) FROM walcast.parked WHERE pipeline = $1`, pipeline).Scan(&n)
	return n
}

// parkedErrors returns walcast.parked's last_error of every parked event
// of the pipeline, by sink.
func parkedErrors(t *testing.T, db *pgx.Conn, pipeline string) map[string][]string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT sink, last_error FROM walcast.parked WHERE pipeline = $1`, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var sink, msg string
		if err := rows.Scan(&sink, &msg); err != nil {
			t.Fatal(err)
		}
		out[sink] = append(out[sink], msg)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// insertItems commits n single-row transactions, ids from..from+n-1.
func insertItems(t *testing.T, db *pgx.Conn, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		exec1(t, db, `INSERT INTO items (id) VALUES ($1)`, i)
	}
}

// workload commits at least n changes to items in transactions of mixed
// size (1 to 5,000 rows): inserts of new rows, updates of existing ones
// (rows change many times, so per-row order is observable) and deletes.
func workload(ctx context.Context, db *pgx.Conn, r *rand.Rand, n int) (int, error) {
	sizes := []int{1, 1, 2, 5, 10, 50, 200, 1000, 5000}
	next, changes := 1, 0
	for changes < n {
		size := sizes[r.IntN(len(sizes))]
		var sql string
		switch op := r.IntN(10); {
		case next < 2*size || op < 5:
			sql = fmt.Sprintf(`INSERT INTO items (id, v, pad) SELECT g, 0, repeat('x', 50) FROM generate_series(%d, %d) g`, next, next+size-1)
			next += size
		case op < 9:
			lo := 1 + r.IntN(next-size)
			sql = fmt.Sprintf(`UPDATE items SET v = v + 1 WHERE id BETWEEN %d AND %d`, lo, lo+size-1)
		default:
			lo := 1 + r.IntN(next-size)
			sql = fmt.Sprintf(`DELETE FROM items WHERE id BETWEEN %d AND %d`, lo, lo+size-1)
		}
		tag, err := db.Exec(ctx, sql)
		if err != nil {
			return changes, err
		}
		changes += int(tag.RowsAffected())
		// Several statements per transaction now and then.
		if r.IntN(4) == 0 {
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `UPDATE items SET v = v + 1 WHERE id = 1`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO items VALUES ($1, 0, 'y')`, next)
				return err
			})
			if err != nil {
				return changes, err
			}
			next++
			changes += 2 // the update may hit a deleted row; counted by truth anyway
		}
	}
	return changes, nil
}

// newSource makes a fresh database for the test, runs the setup
// statements in it (tables, rows), and returns its DSN and a connection
// to it.
func newSource(t testing.TB, setup ...string) (string, *pgx.Conn) {
	t.Helper()
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	for _, sql := range setup {
		exec1(t, db, sql)
	}
	return dsn, db
}
