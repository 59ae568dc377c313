package daemon

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/pauses"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/host/pgtest"
)

// countingHandler counts log records by message, at every level: the
// control listener logs its failed connects at Debug.
type countingHandler struct {
	mu    sync.Mutex
	warns map[string]int // Warn and above
	all   map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.all[r.Message]++
	if r.Level >= slog.LevelWarn {
		h.warns[r.Message]++
	}
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.all[msg]
}

// TestControlAcrossRestart: while PostgreSQL is down the control listener
// backs off instead of spinning, and once it is back a pause made with
// the CLI's store call reaches the scheduler.
func TestControlAcrossRestart(t *testing.T) {
	ctx := context.Background()
	pg, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	dsn := pg.DSN("postgres")
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	tracker := ack.New([]ack.SinkSpec{{ID: "s", Durable: true}}, 0)
	sched := schedule.New(schedule.Config{SinkID: "s"}, fanout.NewQueue(10, true), tracker, &memSink{})
	h := &countingHandler{warns: map[string]int{}, all: map[string]int{}}
	pauseStore := pauses.New(pool, "p")
	ctl := &control{parked: parking.New(pool, "p"), pauses: pauseStore, runs: []*sinkRun{{cfg: &config.Sink{ID: "s"}, sched: sched}}, log: slog.New(h)}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); ctl.listen(lctx, dsn, 500*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	time.Sleep(300 * time.Millisecond)
	if err := pg.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	// Count the listener's connect attempts (one log line each) over a
	// 3 s window: backing off from 1 s they are a handful, a listener
	// that spins makes thousands.
	const connect = "control listener: connect"
	before := h.count(connect)
	time.Sleep(3 * time.Second)
	n := h.count(connect) - before
	if n > 6 {
		t.Fatalf("%d connect attempts in 3 s with PostgreSQL down: the listener spins", n)
	}
	if n == 0 {
		t.Fatal("no connect attempt in 3 s with PostgreSQL down: the check above watches nothing")
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pauseStore.SetPaused(ctx, "s", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pause to reach the scheduler", 30*time.Second, sched.Paused)
	t.Logf("%d connect attempts in 3 s while PostgreSQL was down; warnings: %v", n, h.warns)
	for msg := range h.warns {
		if !strings.Contains(msg, "read") {
			t.Errorf("unexpected warning %q", msg)
		}
	}
}
