package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// connect opens the small pool the stream uses besides its replication
// connection: setup, and primary key lookups for REPLICA IDENTITY FULL
// tables. A pool (not one connection) survives a PostgreSQL restart.
func connect(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open walcast stream: parse dsn: %w", err)
	}
	cfg.MaxConns = 2
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open walcast stream: connect to source database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return nil, fmt.Errorf("open walcast stream: connect to %s:%d/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
		}
		return nil, fmt.Errorf("open walcast stream: cannot reach the source database at %s:%d (is PostgreSQL running and the dsn right?): %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, nil
}

// primaryKeyLookup answers the decoder's question for REPLICA IDENTITY
// FULL tables: which columns are the primary key. (The daemon has the
// same query; both feed capture.Config.PrimaryKey.)
func primaryKeyLookup(pool *pgxpool.Pool) func(schema, table string) ([]string, error) {
	return func(schema, table string) ([]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rows, err := pool.Query(ctx, `
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
