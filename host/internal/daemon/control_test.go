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

// countingHandler counts log records by message, at every level (the
// control listener logs its failed connects at Debug), and keeps when
// each was logged.
type countingHandler struct {
	mu    sync.Mutex
	warns map[string]int // Warn and above
	all   map[string]int
	at    map[string][]time.Time
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.all[r.Message]++
	h.at[r.Message] = append(h.at[r.Message], r.Time)
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

// times is when msg was logged, in order.
func (h *countingHandler) times(msg string) []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.at[msg]...)
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
	h := &countingHandler{warns: map[string]int{}, all: map[string]int{}, at: map[string][]time.Time{}}
	pauseStore := pauses.New(pool, "p")
	ctl := &control{parked: parking.New(pool, "p"), pauses: pauseStore, runs: []*sinkRun{{cfg: &config.Sink{ID: "s"}, sched: sched}}, log: slog.New(h)}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); ctl.listen(lctx, dsn, 500*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "the control listener to listen", 30*time.Second, func() bool {
		var n int
		pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`).Scan(&n)
		return n > 0
	})
	if err := pg.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	// The listener's connect attempts (one log line each) while
	// PostgreSQL is down: backing off from 1 s, consecutive ones are at
	// least a second apart, however slow the machine (load only adds to
	// the gaps); a listener that spins makes them milliseconds apart.
	const connect = "control listener: connect"
	before := h.count(connect)
	waitFor(t, "two connect attempts with PostgreSQL down", time.Minute, func() bool { return h.count(connect) >= before+2 })
	at := h.times(connect)[max(before-1, 0):]
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]).Round(time.Millisecond))
		if gaps[i-1] < 900*time.Millisecond {
			t.Fatalf("connect attempts with PostgreSQL down %v apart: the listener spins", gaps)
		}
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pauseStore.SetPaused(ctx, "s", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pause to reach the scheduler", 30*time.Second, sched.Paused)
	t.Logf("connect attempts %v apart while PostgreSQL was down; warnings: %v", gaps, h.warns)
	for msg := range h.warns {
		if !strings.Contains(msg, "read") {
			t.Errorf("unexpected warning %q", msg)
		}
	}
}
