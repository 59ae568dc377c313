package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

// mirrorReceiver is a webhook receiver that keeps a copy of the source
// table the way a consumer would: it applies each event it accepts, in
// the order it accepts them, first copy of each id only. It refuses, on
// demand, the requests that carry some keys or a truncate (500: a failed
// attempt, parked after max_attempts).
type mirrorReceiver struct {
	*receiver
	mu          sync.Mutex
	refuseKeys  map[int]bool
	refuseTrunc bool
	rows        map[int]json.RawMessage // id → the row as "new" had it
	seen        map[pluginkit.EventID]bool
	order       []received // first copies, in the order they were applied
}

func newMirrorReceiver(t *testing.T) *mirrorReceiver {
	m := &mirrorReceiver{receiver: newReceiver(t), refuseKeys: map[int]bool{}, rows: map[int]json.RawMessage{},
		seen: map[pluginkit.EventID]bool{}}
	m.setRespond(m.respond)
	return m
}

func (m *mirrorReceiver) respond(_ http.Header, _ []byte, evs []received) (int, http.Header) {
	m.mu.Lock()
	defer m.mu.Unlock()
	type envelope struct {
		Op  string `json:"op"`
		Key struct {
			ID int `json:"id"`
		} `json:"key"`
		New json.RawMessage `json:"new"`
		Old *struct {
			ID int `json:"id"`
		} `json:"old"`
	}
	parsed := make([]envelope, len(evs))
	for i, e := range evs {
		if err := json.Unmarshal(e.Raw, &parsed[i]); err != nil {
			m.t.Errorf("receiver: %v: %s", err, e.Raw)
			return http.StatusBadRequest, nil
		}
		p := parsed[i]
		if (p.Op == "truncate" && m.refuseTrunc) || (p.Op != "truncate" && m.refuseKeys[p.Key.ID]) ||
			(p.Old != nil && m.refuseKeys[p.Old.ID]) {
			return http.StatusInternalServerError, nil
		}
	}
	for i, e := range evs {
		if m.seen[e.ID] {
			continue
		}
		m.seen[e.ID] = true
		m.order = append(m.order, e)
		switch p := parsed[i]; p.Op {
		case "truncate":
			clear(m.rows)
		case "delete":
			delete(m.rows, p.Key.ID)
		default:
			if p.Old != nil {
				delete(m.rows, p.Old.ID)
			}
			m.rows[p.Key.ID] = p.New
		}
	}
	return 0, nil
}

func (m *mirrorReceiver) set(f func(m *mirrorReceiver)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

// diff compares the mirror with the source table ("" when equal).
func (m *mirrorReceiver) diff(t *testing.T, db *pgx.Conn) string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT id, to_json(items) FROM items ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	src, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		id  int
		row json.RawMessage
	}, error) {
		var v struct {
			id  int
			row json.RawMessage
		}
		err := r.Scan(&v.id, &v.row)
		return v, err
	})
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var problems []string
	seen := map[int]bool{}
	for _, r := range src {
		seen[r.id] = true
		got, ok := m.rows[r.id]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("row %d is in the source but not at the destination", r.id))
		case !jsonEqual(got, r.row):
			problems = append(problems, fmt.Sprintf("row %d is %s at the destination, %s in the source", r.id, got, r.row))
		}
	}
	for id := range m.rows {
		if !seen[id] {
			problems = append(problems, fmt.Sprintf("row %d is at the destination but not in the source (truncated or deleted there)", id))
		}
	}
	slices.Sort(problems)
	return strings.Join(problems, "; ")
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// orderViolation checks the first copies: each row's events in id order
// (a key change counts for both keys) and every event on the same side of
// each truncate as in the source. "" when none.
func (m *mirrorReceiver) orderViolation() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	last := map[string]pluginkit.EventID{}
	var maxTrunc pluginkit.EventID
	for i, e := range m.order {
		if !maxTrunc.IsZero() && e.ID.Compare(maxTrunc) < 0 {
			return fmt.Sprintf("%s %s arrived after the later truncate %s", e.Op, e.ID, maxTrunc)
		}
		if e.Op == "truncate" {
			maxTrunc = e.ID
			for _, o := range m.order[i+1:] {
				if o.ID.Compare(e.ID) < 0 {
					return fmt.Sprintf("%s %s arrived after the later truncate %s", o.Op, o.ID, e.ID)
				}
			}
			continue
		}
		keys := []string{e.Key}
		var env struct {
			Old json.RawMessage `json:"old"`
		}
		if json.Unmarshal(e.Raw, &env) == nil && len(env.Old) > 0 && string(env.Old) != "null" {
			if k := compactJSON(env.Old); k != e.Key {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			if p, ok := last[k]; ok && e.ID.Compare(p) <= 0 {
				return fmt.Sprintf("row %s: %s arrived after %s", k, e.ID, p)
			}
			last[k] = e.ID
		}
	}
	return ""
}

func compactJSON(b json.RawMessage) string {
	var v struct {
		ID int `json:"id"`
	}
	json.Unmarshal(b, &v)
	return fmt.Sprintf(`{"id":%d}`, v.ID)
}

// TestTruncateReplayNemesis drives a running daemon, a real webhook
// receiver keeping a mirror of the source table, and `walcast replay`
// through both ways a TRUNCATE used to be crossed by a replay, then
// through random rounds of inserts, updates, key changes, deletes and
// TRUNCATEs while the receiver refuses rows and truncates on demand and
// `walcast replay --id` and `--all` run. After each phase the receiver is
// healed and everything replayed: the mirror must hold the source's rows,
// in an order the validator accepts. WALCAST_CHAOS multiplies the rounds.
func TestTruncateReplayNemesis(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcv := newMirrorReceiver(t)
	pipeline := writePipeline(t, "truncreplay", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 5,
		Extra: "    max_in_flight = 4\n    max_attempts = 2\n    retry_base = \"20ms\"\n"})
	startWalcast(t, pipeline)
	waitSlot(t, db, "walcast_truncreplay")

	// settle waits until everything committed so far is resolved for the
	// sink (delivered or parked): the slot is confirmed past it.
	settle := func() {
		t.Helper()
		end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
		waitFor(t, "the slot to pass what was committed", 2*time.Minute, func() bool {
			return confirmedFlush(t, db, "walcast_truncreplay") >= end
		})
	}
	parked := func() []string {
		t.Helper()
		rows, err := db.Query(context.Background(),
			`SELECT event_id FROM walcast.parked WHERE pipeline = 'truncreplay' ORDER BY commit_lsn, idx`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	replay := func(args ...string) {
		t.Helper()
		out, err := walcastCLI(t, append([]string{"replay", pipeline, "--sink", "hook"}, args...)...)
		if err != nil && !strings.Contains(out, "still parked") && !strings.Contains(out, "is not parked") {
			t.Fatalf("walcast replay %v: %v\n%s", args, err, out)
		}
	}
	// healAndCheck heals the receiver, replays until nothing is parked and
	// compares the mirror with the source.
	healAndCheck := func(phase string) {
		t.Helper()
		rcv.set(func(m *mirrorReceiver) { clear(m.refuseKeys); m.refuseTrunc = false })
		settle()
		for try := 0; len(parked()) > 0; try++ {
			if try == 5 {
				t.Fatalf("%s: %d events still parked after 5 replays with the receiver healed", phase, len(parked()))
			}
			replay("--all")
			settle()
		}
		if d := rcv.diff(t, db); d != "" {
			t.Fatalf("%s: the mirror differs from the source: %s", phase, d)
		}
		if v := rcv.orderViolation(); v != "" {
			t.Fatalf("%s: %s", phase, v)
		}
	}

	// A row parked behind a parked TRUNCATE, replayed by id, must bring
	// the truncate along (else the truncate, replayed later, deletes it).
	exec1(t, db, `INSERT INTO items VALUES (1, 1)`)
	settle()
	rcv.set(func(m *mirrorReceiver) { m.refuseTrunc = true })
	exec1(t, db, `TRUNCATE items`)
	exec1(t, db, `INSERT INTO items VALUES (2, 2)`)
	settle()
	if ids := parked(); len(ids) != 2 {
		t.Fatalf("parked %v, want the truncate and the insert behind it", ids)
	}
	rcv.set(func(m *mirrorReceiver) { m.refuseTrunc = false })
	replay("--id", parked()[1])
	healAndCheck("replay --id of a row parked behind a truncate")

	// A TRUNCATE after a parked row must wait for it (else the row's
	// replay brings back a row the source truncated).
	rcv.set(func(m *mirrorReceiver) { m.refuseKeys[3] = true })
	exec1(t, db, `INSERT INTO items VALUES (3, 3)`)
	settle()
	exec1(t, db, `TRUNCATE items`)
	exec1(t, db, `INSERT INTO items VALUES (4, 4)`)
	settle()
	rcv.set(func(m *mirrorReceiver) { clear(m.refuseKeys) })
	replay("--id", parked()[0])
	healAndCheck("a truncate after a parked row")

	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("WALCAST_NEMESIS_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	rounds := pgtest.Chaos(t, 25)
	t.Logf("random rounds: %d, seed %d (WALCAST_NEMESIS_SEED)", rounds, seed)
	for round := range rounds {
		switch k := r.IntN(10); {
		case k < 5:
			exec1(t, db, randomTx(r))
		case k < 7:
			key := r.IntN(8)
			rcv.set(func(m *mirrorReceiver) { m.refuseKeys[key] = !m.refuseKeys[key] })
		case k < 8:
			rcv.set(func(m *mirrorReceiver) { m.refuseTrunc = !m.refuseTrunc })
		default:
			settle()
			if ids := parked(); len(ids) > 0 && r.IntN(2) == 0 {
				replay("--id", ids[r.IntN(len(ids))], "--wait", "0")
			} else {
				replay("--all", "--wait", "0")
			}
		}
		if round%8 == 7 {
			healAndCheck(fmt.Sprintf("random round %d (seed %d)", round, seed))
		}
	}
	healAndCheck(fmt.Sprintf("after %d random rounds (seed %d)", rounds, seed))
}

// randomTx is one transaction of one to three random changes of items
// (ids 0 to 7): inserts (ignored when the row exists), updates, key
// changes, deletes and TRUNCATEs.
func randomTx(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("BEGIN;")
	for range 1 + r.IntN(3) {
		a, c := r.IntN(8), r.IntN(8)
		switch k := r.IntN(20); {
		case k < 7:
			fmt.Fprintf(&b, "INSERT INTO items VALUES (%d, %d) ON CONFLICT (id) DO UPDATE SET v = excluded.v;", a, r.IntN(1000))
		case k < 11:
			fmt.Fprintf(&b, "UPDATE items SET v = v + 1 WHERE id = %d;", a)
		case k < 14:
			fmt.Fprintf(&b, "UPDATE items SET id = %d WHERE id = %d AND NOT EXISTS (SELECT FROM items WHERE id = %d);", c, a, c)
		case k < 17:
			fmt.Fprintf(&b, "DELETE FROM items WHERE id = %d;", a)
		default:
			b.WriteString("TRUNCATE items;")
		}
	}
	b.WriteString("COMMIT;")
	return b.String()
}
