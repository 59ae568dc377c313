package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/walcast/walcast/host/internal/pg"
)

// Querier is the part of pgx the stores need; *pgxpool.Pool, *pgx.Conn
// and pgx.Tx all satisfy it, and so does the daemon's fenced pool, whose
// writes go through the leader's session.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ Querier = (*pgxpool.Pool)(nil)

// Beginner is a Querier that can also start a transaction. The writes
// that must commit together (a migration, an accepted gap) ask a Querier
// for it when they run, and fail with an error naming the Querier's type
// rather than write half of what they must.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Channel is the NOTIFY channel the CLI wakes a running daemon with
// after a replay request, a pause or resume, or a backfill request; the
// payload is the pipeline name ("backfill" for a backfill). The daemon
// also polls, so a lost notification only delays. It is pg's, where the
// source packages, which import nothing of the control plane, read it too.
const Channel = pg.ControlChannel

// Notify wakes the running daemon of pipeline, if any.
func Notify(ctx context.Context, db Querier, pipeline string) error {
	if _, err := db.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, pipeline); err != nil {
		return fmt.Errorf("notify the daemon of pipeline %s: %w", pipeline, err)
	}
	return nil
}

// NoSchema reports whether err says that the walcast schema, or the table
// a statement names, does not exist: the database was never initialised,
// or by a walcast older than the table. Readers that show state (status,
// the console) read that as "nothing recorded".
func NoSchema(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000")
}
