package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// memSink is an in-process Plugin: the seam where tests need a sink that
// fails or stalls on demand.
type memSink struct {
	mu     sync.Mutex
	events []pluginkit.Event
	gate   chan struct{} // when non-nil, Deliver waits for it
}

func (m *memSink) Close(context.Context) error { return nil }
func (m *memSink) Info() pluginkit.Info        { return pluginkit.Info{Name: "mem"} }
func (m *memSink) Deliver(ctx context.Context, b attempt.Batch) (attempt.Result, error) {
	m.mu.Lock()
	gate := m.gate
	m.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return attempt.Result{}, ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, b.Events...)
	return attempt.Result{}, nil
}
func (m *memSink) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.events)
}

func pipelineFor(t *testing.T, dsn string, sinks ...string) *config.Pipeline {
	t.Helper()
	src := fmt.Sprintf("pipeline = \"p\"\nsource \"postgres\" {\n dsn = %q\n tables = [\"public.items\"]\n}\n", dsn)
	for _, s := range sinks {
		src += fmt.Sprintf("sink \"mem\" %q {\n delivery {\n batch_size = 50\n retry_base = \"50ms\"\n }\n config {}\n}\n", s)
	}
	p, diags := config.Parse([]byte(src), "test.hcl")
	if diags.HasErrors() {
		t.Fatal(config.FormatDiagnostics(diags))
	}
	return p
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStreamsAndConfirms(t *testing.T) {
	ctx := context.Background()
	dsn := cluster.Database(t)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	if _, err := db.Exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, v text); CREATE TABLE other (id int)`); err != nil {
		t.Fatal(err)
	}
	fast, slow := &memSink{}, &memSink{gate: make(chan struct{})}
	sinks := map[string]*memSink{"fast": fast, "slow": slow}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- Run(runCtx, Options{
			Pipeline: pipelineFor(t, dsn, "fast", "slow"),
			Launch: func(_ context.Context, s *config.Sink) (Plugin, pluginkit.OpenResult, error) {
				return sinks[s.ID], pluginkit.OpenResult{}, nil
			},
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Ready:  func() { close(ready) },
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before streaming: %v", err)
	}
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
		// Slots are cluster-wide: let -count=N start afresh.
		db.Exec(context.Background(), `SELECT pg_drop_replication_slot('walcast_p')`)
	})
	confirmed := func() uint64 {
		var lsn string
		if err := db.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'walcast_p'`).Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		v, _ := pluginkit.ParseLSN(lsn)
		return v
	}
	// Idle keepalives may confirm WAL written before the inserts (the
	// walcast schema's own writes), never an insert.
	var beforeText string
	if err := db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&beforeText); err != nil {
		t.Fatal(err)
	}
	before, _ := pluginkit.ParseLSN(beforeText)
	for i := 0; i < 500; i++ {
		if _, err := db.Exec(ctx, `INSERT INTO items VALUES ($1, 'x')`, i); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "fast sink to get 500 events", 30*time.Second, func() bool { return fast.count() == 500 })
	// The slow sink has acknowledged nothing: the slot must not move.
	time.Sleep(300 * time.Millisecond)
	if got := confirmed(); got > before {
		t.Fatalf("confirmed_flush_lsn %X is past the WAL position %X before the inserts while a durable sink acknowledged nothing", got, before)
	}
	close(slow.gate)
	waitFor(t, "slow sink to get 500 events", 30*time.Second, func() bool { return slow.count() == 500 })
	var end string
	if err := db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	endLSN, _ := pluginkit.ParseLSN(end)
	// The end of the burst (the WAL past its last commit, reached by an
	// idle advance) is confirmed promptly, not after the 10 s that
	// idle-only records wait for each other (docs/reference/schema.md,
	// walcast.pipelines.confirm_limit). That interval is the bound: a
	// confirmation that waited for it took 10.1 s, a prompt one takes
	// well under a second, so the wait itself has a generous deadline and
	// only the product's own figure fails the test.
	const idleRecordEvery = 10 * time.Second
	start := time.Now()
	waitFor(t, "slot to reach the end of the burst", time.Minute, func() bool { return confirmed() >= endLSN })
	took := time.Since(start)
	t.Logf("the end of the burst was confirmed %s after its last event was delivered", took.Round(time.Millisecond))
	if took >= idleRecordEvery {
		t.Fatalf("the end of the burst was confirmed %s after its last event was delivered: it waited for the idle-only record interval (%s)", took.Round(time.Millisecond), idleRecordEvery)
	}
	var end2 string
	if err := db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end2); err != nil {
		t.Fatal(err)
	}
	endLSN, _ = pluginkit.ParseLSN(end2)
	// Idle captured table, writes elsewhere: keepalives advance the slot.
	if _, err := db.Exec(ctx, `INSERT INTO other SELECT generate_series(1, 100)`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "slot to advance past the idle point", 30*time.Second, func() bool { return confirmed() >= endLSN })
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for a second stop in Cleanup
	seen := map[pluginkit.EventID]bool{}
	for _, ev := range fast.events {
		if ev.ID.Index != 0 || seen[ev.ID] {
			t.Fatalf("event %s delivered twice or with a wrong index", ev.ID)
		}
		seen[ev.ID] = true
	}
}
