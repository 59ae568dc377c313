package capture

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/pg"
)

// Connect opens the small pool every walcast process uses beside its
// replication connection (setup, checkpoints, parked events, primary key
// lookups), and explains the usual ways that fails. A pool rather than one
// connection, so that it survives a PostgreSQL restart.
func Connect(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse source dsn: %w", err)
	}
	cfg.MaxConns = maxConns
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	return ConnectConfig(ctx, cfg)
}

// ConnectConfig is Connect for a parsed configuration (which a caller
// may have given runtime parameters, such as a read-only session).
// Every error is one line, the real cause first (pg.ConnectFailed).
func ConnectConfig(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, pg.ConnectFailed("connect to source database", &cfg.ConnConfig.Config, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return nil, pg.ConnectFailed("connect to source database", &cfg.ConnConfig.Config, err)
		}
		return nil, fmt.Errorf("cannot reach the source database at %s:%d: %w — check the dsn and that PostgreSQL is running and accepts connections",
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, pg.ConnectFailed("connect", nil, err))
	}
	return pool, nil
}

// PrimaryKeyLookup answers the decoder's question for REPLICA IDENTITY
// FULL tables (Config.PrimaryKey): which columns are the primary key. It
// runs inside the capture loop, so it bounds itself to ten seconds within
// the stream's context.
func PrimaryKeyLookup(db Querier) func(ctx context.Context, schema, table string) ([]string, error) {
	return func(ctx context.Context, schema, table string) ([]string, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		rows, err := db.Query(ctx, `
SELECT a.attname FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary
ORDER BY k.ord`, schema, table)
		if err != nil {
			return nil, fmt.Errorf("look up primary key of %s.%s: %w", schema, table, err)
		}
		defer rows.Close()
		var cols []string
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				return nil, fmt.Errorf("look up primary key of %s.%s: %w", schema, table, err)
			}
			cols = append(cols, c)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("look up primary key of %s.%s: %w", schema, table, err)
		}
		return cols, nil
	}
}
