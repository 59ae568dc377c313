package cli

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// outboxSchema is a service's tables: the aggregates it keeps (the
// business rows) and its outbox, with Debezium's column names.
var outboxSchema = []string{
	`CREATE TABLE aggregates (id text PRIMARY KEY, kind text NOT NULL, version int NOT NULL DEFAULT 0)`,
	`CREATE TABLE outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text, aggregateid text, type text, payload jsonb)`,
}

// serviceTx is one transaction of the service, as docs/outbox.md
// recommends: it changes a business row, inserts the event into the
// outbox and deletes it again, so the table stays empty. The event says
// which version of the aggregate it made; the row lock on the aggregate
// orders one aggregate's transactions, so versions commit in order. A
// rolled-back one publishes nothing.
func serviceTx(ctx context.Context, pool *pgxpool.Pool, agg string, rollback bool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var kind string
		var version int
		if err := tx.QueryRow(ctx, `UPDATE aggregates SET version = version + 1 WHERE id = $1 RETURNING kind, version`, agg).Scan(&kind, &version); err != nil {
			return err
		}
		var id string
		if err := tx.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
VALUES ($1, $2, 'VersionBumped', jsonb_build_object('agg', $2::text, 'version', $3::int)) RETURNING id::text`, kind, agg, version).Scan(&id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM outbox WHERE id = $1`, id); err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	if errors.Is(err, errRollback) {
		return nil
	}
	return err
}

var errRollback = errors.New("rolled back on purpose")

// outboxAggregates creates n aggregates, every third a customer, the
// others orders.
func outboxAggregates(t *testing.T, db *pgx.Conn, n int) {
	t.Helper()
	exec1(t, db, `INSERT INTO aggregates (id, kind) SELECT 'a-' || i, CASE WHEN i % 3 = 0 THEN 'customer' ELSE 'order' END FROM generate_series(1, $1) i`, n)
}

// TestOutboxKafkaExactlyOncePerAggregateOrder: several writers run
// service transactions (a business row, an outbox insert, its delete, one
// in ten rolled back) over many aggregates while walcast, delivering to
// Kafka with eos, is SIGKILLed twice mid-stream. Read back with kcat
// (read_committed), each topic outbox.event.<aggregatetype> holds exactly
// one record per committed outbox insert, keyed by the aggregate id (its
// JSON), the payload as value, the id and type headers; each aggregate's
// events are in commit order. The truth is the database's: an aggregate
// at version V published versions 1..V. The business table's changes
// reach their own topic unchanged, once each.
func TestOutboxKafkaExactlyOncePerAggregateOrder(t *testing.T) {
	parallel(t)
	needKcat(t)
	ctx := context.Background()
	start := time.Now()
	dsn, db := newSource(t, outboxSchema...)
	const aggregates = 24
	outboxAggregates(t, db, aggregates)
	addr := startKafka(t)
	adm := kadm.NewClient(kafkaClient(t, addr, kgo.MetadataMinAge(10*time.Millisecond), kgo.MetadataMaxAge(100*time.Millisecond)))
	topics := []string{"outbox.event.order", "outbox.event.customer"}
	written := func() int64 {
		var n int64
		for _, tp := range topics {
			n += highWatermarks(ctx, adm, tp)
		}
		return n
	}
	name := "outbox_kafka"
	pipeline := writePipeline(t, name, dsn, []string{"public.aggregates", "public.outbox"}, sinkSpec{
		ID: "kafka", SinkType: "kafka", Batch: kafkaBatch, Config: kafkaConfig(addr, true, "walcast-"+name),
		Top: "  outbox { table = \"public.outbox\" }\n",
	})
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	proc := startWalcast(t, pipeline)
	procs := []*walcastProc{proc}
	waitSlot(t, db, "walcast_"+name)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var werr atomic.Value
	const writers = 4
	for w := range writers {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				agg := fmt.Sprintf("a-%d", 1+(i*7+w*5)%aggregates)
				if err := serviceTx(ctx, pool, agg, (i+w)%10 == 9); err != nil {
					werr.Store(err)
					return
				}
			}
		})
	}
	// Two SIGKILLs, each once the restarted walcast has written more
	// records: both land mid-stream, with the writers still going.
	const kills = 2
	for kill := 1; kill <= kills; kill++ {
		target := written() + 150
		waitFor(t, "records before kill", 2*time.Minute, func() bool { return written() >= target })
		proc.kill()
		t.Logf("kill %d: walcast SIGKILLed at %d outbox records written", kill, written())
		proc = startWalcast(t, pipeline)
		procs = append(procs, proc)
	}
	target := written() + 150
	waitFor(t, "records after the last kill", 2*time.Minute, func() bool { return written() >= target })
	stop.Store(true)
	wg.Wait()
	if err, _ := werr.Load().(error); err != nil {
		t.Fatal(err)
	}
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "slot to confirm the workload", 3*time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })
	proc.stop()

	// The truth: each aggregate's version, and its kind.
	rows, err := db.Query(ctx, `SELECT id, kind, version FROM aggregates`)
	if err != nil {
		t.Fatal(err)
	}
	type aggregate struct {
		kind    string
		version int
	}
	want := map[string]aggregate{}
	total := 0
	for rows.Next() {
		var id string
		var a aggregate
		if err := rows.Scan(&id, &a.kind, &a.version); err != nil {
			t.Fatal(err)
		}
		want[id] = a
		total += a.version
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	var left int
	db.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&left)
	if left != 0 {
		t.Fatalf("%d rows left in the outbox: the workload does not follow the recipe", left)
	}

	got := map[string][]int{} // aggregate → versions, in log order
	ids := map[string]bool{}
	records := 0
	for _, tp := range topics {
		for _, r := range readKcat(t, addr, tp) {
			records++
			var v struct {
				Agg     string `json:"agg"`
				Version int    `json:"version"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("%s offset %d: value %q is not the payload: %v", tp, r.Offset, r.Value, err)
			}
			if exact := fmt.Sprintf(`{"agg":%q,"version":%d}`, v.Agg, v.Version); string(r.Value) != exact {
				t.Fatalf("%s: value %s, want the payload as it is, %s", tp, r.Value, exact)
			}
			if key := fmt.Sprintf("%q", v.Agg); string(r.Key) != key {
				t.Fatalf("%s: key %s, want the aggregate id's JSON %s", tp, r.Key, key)
			}
			if tp != "outbox.event."+want[v.Agg].kind {
				t.Fatalf("aggregate %s (%s) landed in %s", v.Agg, want[v.Agg].kind, tp)
			}
			id := r.Headers["id"]
			if len(id) != 36 || ids[id] || r.Headers["type"] != "VersionBumped" || r.Headers["walcast-id"] == "" {
				t.Fatalf("%s offset %d: headers %v (id missing, malformed or seen before)", tp, r.Offset, r.Headers)
			}
			ids[id] = true
			got[v.Agg] = append(got[v.Agg], v.Version)
		}
	}
	for id, a := range want {
		vs := got[id]
		ok := len(vs) == a.version
		for i := 0; ok && i < len(vs); i++ {
			ok = vs[i] == i+1
		}
		if !ok {
			t.Fatalf("aggregate %s is at version %d; its topic holds versions %v, want 1..%d once each, in order", id, a.version, vs, a.version)
		}
	}
	if business := len(readKcat(t, addr, "walcast.public.aggregates")); business != total {
		t.Fatalf("the business table's topic holds %d records, want one per committed transaction, %d", business, total)
	}
	t.Logf("%d outbox events over %d aggregates, %d writers, %d host SIGKILLs: exactly once, in per-aggregate order, in %s",
		records, aggregates, writers, kills, time.Since(start).Round(time.Second))
}

// docOutboxSQL returns the statements of docs/outbox.md's sql block
// holding marker, "--" comments left out.
func docOutboxSQL(t *testing.T, marker string) []string {
	t.Helper()
	for _, b := range docBlocks(t) {
		if b.file != "outbox.md" || b.lang != "sql" || !strings.Contains(b.text, marker) {
			continue
		}
		var text strings.Builder
		for _, l := range strings.Split(b.text, "\n") {
			if i := strings.Index(l, "--"); i >= 0 {
				l = l[:i]
			}
			text.WriteString(l + "\n")
		}
		var out []string
		for _, st := range strings.Split(text.String(), ";") {
			if st = strings.TrimSpace(st); st != "" {
				out = append(out, st)
			}
		}
		return out
	}
	t.Fatalf("docs/outbox.md has no sql block with %q", marker)
	return nil
}

// TestOutboxWebhook: the webhook sink POSTs each outbox event on its own,
// to the URL's path joined with the route, the payload as the body (a
// jsonb document, a text column's content), the id and type as
// Walcast-Outbox-* headers, signed as Standard Webhooks says. The table
// and the service transaction are docs/outbox.md's, run as they are. A
// row with a NULL aggregate id is parked with an error naming the column,
// without holding the others back.
func TestOutboxWebhook(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	setup := append(docOutboxSQL(t, "CREATE TABLE outbox"),
		`CREATE TABLE orders (id int PRIMARY KEY, status text)`, `INSERT INTO orders VALUES (42, 'new')`,
		`CREATE TABLE notes (id bigint PRIMARY KEY, aggregatetype text, aggregateid text, type text, payload text)`)
	dsn, db := newSource(t, setup...)
	type request struct {
		path, contentType, id, typ, webhookID, signature, timestamp string
		body                                                        []byte
	}
	var mu sync.Mutex
	var got []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, request{path: r.URL.Path, contentType: r.Header.Get("Content-Type"), id: r.Header.Get("Walcast-Outbox-Id"),
			typ: r.Header.Get("Walcast-Outbox-Type"), webhookID: r.Header.Get("Webhook-Id"), signature: r.Header.Get("Webhook-Signature"),
			timestamp: r.Header.Get("Webhook-Timestamp"), body: body})
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	top := "  tables = [\"public.outbox\"]\n  outbox { table = \"public.outbox\" }\n"
	pipeline := writePipeline(t, "outbox_hook", dsn, []string{"public.outbox", "public.notes"},
		sinkSpec{ID: "hook", Top: top, Config: fmt.Sprintf("    url = %q\n    secret = %q\n", srv.URL+"/hooks", secret)},
		sinkSpec{ID: "notes", Top: "  tables = [\"public.notes\"]\n  outbox {\n    table = \"public.notes\"\n    route_prefix = \"\"\n  }\n", Config: fmt.Sprintf("    url = %q\n", srv.URL+"/notes")})
	proc := startWalcast(t, pipeline)
	waitSlot(t, db, "walcast_outbox_hook")
	exec1(t, db, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
  ('00000000-0000-0000-0000-000000000001', 'invoice', 'i-1', 'InvoiceSent', '{"total": 12.5}'),
  ('00000000-0000-0000-0000-000000000003', 'customer', 'c-1', 'CustomerMoved', '{"city": "Köln"}')`)
	exec1(t, db, `DELETE FROM outbox`)
	for _, st := range docOutboxSQL(t, "BEGIN") {
		exec1(t, db, st)
	}
	exec1(t, db, `INSERT INTO notes VALUES (7, 'memo', 'm-1', 'Noted', 'plain text, "quoted"'), (8, 'memo', NULL, 'Noted', 'lost?')`)
	waitFor(t, "four outbox events", time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 4 })
	var parked string
	waitFor(t, "the NULL aggregate id parked", time.Minute, func() bool {
		return db.QueryRow(ctx, `SELECT last_error FROM walcast.parked WHERE sink = 'notes'`).Scan(&parked) == nil
	})
	proc.stop()
	if !strings.Contains(parked, `column "aggregateid" (the aggregate id) is NULL`) {
		t.Fatalf("parked with %q, want the column named", parked)
	}
	mu.Lock()
	defer mu.Unlock()
	byPath := map[string]request{}
	for _, r := range got {
		if _, dup := byPath[r.path]; dup {
			t.Fatalf("two requests to %s: %+v", r.path, got)
		}
		byPath[r.path] = r
	}
	want := []request{
		{path: "/hooks/outbox.event.invoice", contentType: "application/json", id: "00000000-0000-0000-0000-000000000001", typ: "InvoiceSent", body: []byte(`{"total":12.5}`)},
		{path: "/hooks/outbox.event.customer", contentType: "application/json", id: "00000000-0000-0000-0000-000000000003", typ: "CustomerMoved", body: []byte(`{"city":"Köln"}`)},
		{path: "/hooks/outbox.event.order", contentType: "application/json", id: "0b6f1c2e-8f7a-4c1e-9a57-6b2f0f7d9e11", typ: "OrderPaid", body: []byte(`{"total":169.74,"order_id":42}`)},
		{path: "/notes/memo", contentType: "text/plain; charset=utf-8", id: "7", typ: "Noted", body: []byte(`plain text, "quoted"`)},
	}
	if len(got) != len(want) {
		t.Fatalf("%d requests, want %d: %+v", len(got), len(want), got)
	}
	for _, w := range want {
		r, ok := byPath[w.path]
		if !ok || r.contentType != w.contentType || r.id != w.id || r.typ != w.typ || string(r.body) != string(w.body) {
			t.Fatalf("request to %s: %+v (body %s)\nwant %+v (body %s)", w.path, r, r.body, w, w.body)
		}
		if !strings.HasPrefix(w.path, "/hooks/") {
			continue
		}
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(r.webhookID + "." + r.timestamp + "."))
		mac.Write(r.body)
		if sig := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); r.webhookID == "" || r.signature != sig {
			t.Fatalf("request to %s: signature %q, want %q over id %q", w.path, r.signature, sig, r.webhookID)
		}
	}
}
