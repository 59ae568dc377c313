package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// routedReceiver records the events of every webhook request by the
// request's path (the route of a routed sink).
type routedReceiver struct {
	parse *receiver
	mu    sync.Mutex
	got   map[string][]received
}

func (r *routedReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	evs, err := r.parse.batchEvents(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.got[req.URL.Path] = append(r.got[req.URL.Path], evs...)
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (r *routedReceiver) snapshot() map[string][]received {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]received{}
	for k, v := range r.got {
		out[k] = append([]received(nil), v...)
	}
	return out
}

// rulesTenant is the tenant of an orders event: the new row's, or the old
// row's for a delete (REPLICA IDENTITY FULL).
func rulesTenant(t testing.TB, r received) string {
	e := parseFull(t, r)
	row := e.New
	if e.Op == "delete" {
		row = e.Old
	}
	s, _ := row["tenant"].(string)
	return s
}

const rulesSinks = `
  filter = "(op == 'delete' ? old.tenant : new.tenant) != 't3'"
  route  = "'tenant/' + (op == 'delete' ? old.tenant : new.tenant)"
  transform {
    drop   = ["secret"]
    mask   = { email = "sha256" }
    rename = { status = "state" }
    set    = { region = "new.tenant == 't1' ? 'eu' : 'other'" }
  }
`

// One sink gets everything, a second the same stream through a filter, a
// route and a transform, under two writers that insert, update, delete and
// change keys. The routed sink receives exactly the events the filter
// selects (the same predicate evaluated here over the first sink's
// output), each at the path its route names; no masked or dropped value
// reaches it; each destination gets its rows' events in commit order; and
// a mirror per destination, built from what it received, equals the
// source rows of its tenant, transformed the same way in Go.
func TestFilterTransformRoute(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t, `CREATE TABLE orders (id int PRIMARY KEY, tenant text NOT NULL, status text NOT NULL, qty int NOT NULL, email text NOT NULL, secret text NOT NULL)`,
		`ALTER TABLE orders REPLICA IDENTITY FULL`)
	all := newReceiver(t)
	routed := &routedReceiver{parse: newReceiver(t), got: map[string][]received{}}
	base := serveLoopback(t, routed) + "/hooks"
	pipeline := writePipeline(t, "rules", dsn, []string{"public.orders"},
		sinkSpec{ID: "all", URL: all.URL},
		sinkSpec{ID: "routed", URL: base, Top: rulesSinks})
	proc := startWalcast(t, pipeline)
	defer proc.stop()
	waitSlot(t, db, "walcast_rules")

	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() { rulesWriter(t, dsn, w, 120) })
	}
	wg.Wait()
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "the slot to confirm everything", time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_rules") >= end
	})

	// Exactly the events the predicate selects.
	want := map[pluginkit.EventID]string{}
	for _, r := range all.events() {
		if tenant := rulesTenant(t, r); tenant != "t3" {
			want[r.ID] = "/hooks/tenant/" + tenant
		}
	}
	got := map[pluginkit.EventID]string{}
	byPath := routed.snapshot()
	for path, evs := range byPath {
		for _, r := range evs {
			got[r.ID] = path
			for _, leak := range []string{"@example.com", "secret-"} {
				if strings.Contains(string(r.Raw), leak) {
					t.Fatalf("a masked or dropped value reached the routed sink: %s", r.Raw)
				}
			}
		}
		last := map[string]pluginkit.EventID{}
		for _, r := range firstCopies(evs) {
			if p, ok := last[r.Key]; ok && r.ID.Compare(p) <= 0 {
				t.Fatalf("%s: row %s got %s after %s", path, r.Key, r.ID, p)
			}
			last[r.Key] = r.ID
		}
	}
	if len(want) < 100 || !maps.Equal(got, want) {
		t.Fatalf("the routed sink got %d events, the predicate selects %d of the unfiltered sink's %d (or a route differs)", len(got), len(want), len(all.events()))
	}
	t.Logf("unfiltered: %d events; routed: %d events over %d paths", len(all.events()), len(got), len(byPath))

	for _, tenant := range []string{"t1", "t2"} {
		mirror := rulesMirror(t, byPath["/hooks/tenant/"+tenant])
		source := tableRowsWhere(t, db, "orders", fmt.Sprintf("tenant = '%s'", tenant), []string{"id"})
		for k, row := range source {
			source[k] = rulesTransform(row)
		}
		if !reflect.DeepEqual(mirror, source) {
			t.Fatalf("tenant %s: mirror of %d rows differs from the %d transformed source rows", tenant, len(mirror), len(source))
		}
	}
}

// rulesWriter runs n transactions on its own rows (ids ≡ w mod 2):
// inserts, updates, deletes and key changes; a row's tenant never changes.
func rulesWriter(t *testing.T, dsn string, w, n int) {
	db := connect(t, dsn)
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	var live []int
	next := w
	for range n {
		var sql string
		switch k := rng.IntN(10); {
		case k < 4 || len(live) < 3:
			next += 2
			live = append(live, next)
			sql = fmt.Sprintf(`INSERT INTO orders VALUES (%d, 't%d', 'new', %d, 'user%d@example.com', 'secret-%d')`, next, next%3+1, rng.IntN(9), next, next)
		case k < 7:
			id := live[rng.IntN(len(live))]
			sql = fmt.Sprintf(`UPDATE orders SET status = 'paid', qty = qty + 1 WHERE id = %d`, id)
		case k < 8:
			i := rng.IntN(len(live))
			sql = fmt.Sprintf(`UPDATE orders SET id = id + 100000 WHERE id = %d`, live[i])
			live[i] += 100000
		default:
			i := rng.IntN(len(live))
			sql = fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, live[i])
			live = append(live[:i], live[i+1:]...)
		}
		if _, err := db.Exec(context.Background(), sql); err != nil {
			t.Error(err)
			return
		}
	}
}

// rulesMirror applies the events a destination received, in arrival
// order, skipping redeliveries; an update that changed the key moves the
// row (old is the whole row: REPLICA IDENTITY FULL).
func rulesMirror(t testing.TB, evs []received) map[string]map[string]any {
	rows := map[string]map[string]any{}
	for _, r := range firstCopies(evs) {
		e := parseFull(t, r)
		if e.Old != nil {
			delete(rows, rowKey(e.Old, []string{"id"}))
		}
		if e.Op != "delete" {
			rows[rowKey(e.New, []string{"id"})] = e.New
		}
	}
	return rows
}

// rulesTransform is rulesSinks' transform in Go, on a row as to_json reads
// it.
func rulesTransform(row map[string]any) map[string]any {
	out := maps.Clone(row)
	delete(out, "secret")
	sum := sha256.Sum256([]byte(row["email"].(string)))
	out["email"] = hex.EncodeToString(sum[:])
	out["state"] = out["status"]
	delete(out, "status")
	out["region"] = "other"
	if row["tenant"] == "t1" {
		out["region"] = "eu"
	}
	return out
}
