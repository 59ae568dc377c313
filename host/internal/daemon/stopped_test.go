package daemon

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/pluginkit"
)

// cancelOn is a slog handler that cancels a context when a record with the
// given message is logged: it stops Run at an exact point of its start.
type cancelOn struct {
	slog.Handler
	msg    string
	cancel context.CancelFunc
}

func (h cancelOn) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.cancel()
	}
	return h.Handler.Handle(ctx, r)
}

func (h cancelOn) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

func (h cancelOn) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

// A start that is stopped (SIGTERM) after it created the slot and before it
// streams is not a failed start: the slot already holds the changes
// committed since, so it must survive for the next run. Only a start that
// fails removes what it created.
func TestStoppedStartKeepsItsSlot(t *testing.T) {
	ctx := context.Background()
	dsn := cluster.Database(t)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec(context.Background(), `SELECT pg_drop_replication_slot('walcast_p')`)
		db.Close(context.Background())
	})
	if _, err := db.Exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, v text)`); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	base := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, Options{
			Pipeline: pipelineFor(t, dsn, "s"),
			Launch: func(context.Context, *config.Sink) (Plugin, pluginkit.OpenResult, error) {
				return &memSink{}, pluginkit.OpenResult{}, nil
			},
			Logger: slog.New(cancelOn{Handler: base, msg: "created replication slot", cancel: stop}),
			Ready:  func() { t.Error("Run streamed although it was stopped while it started") },
		})
	}()
	select {
	case err := <-done:
		t.Logf("Run returned %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after it was stopped")
	}
	var slots, pubs int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walcast_p'),
		(SELECT count(*) FROM pg_publication)`).Scan(&slots, &pubs); err != nil {
		t.Fatal(err)
	}
	if slots != 1 || pubs == 0 {
		t.Fatalf("a start stopped after it created them left %d slot(s) and %d publication(s); want the slot and its publication kept", slots, pubs)
	}
}
