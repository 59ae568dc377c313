package leader

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
)

// presenceClass keys the shared advisory locks of Presence: one per
// pipeline a process runs, leader or standby, with the same object key
// as the pipeline's leadership lock (Keys).
const presenceClass = 0x77636174 // "wcat"

// presenceKeys returns the object keys of pipelines' presence locks.
func presenceKeys(pipelines []string) []int32 {
	objs := make([]int32, len(pipelines))
	for i, p := range pipelines {
		_, objs[i] = Keys(p)
	}
	return objs
}

// Presence is a process's standing session on a source database. It holds
// a shared advisory lock for every pipeline the process runs there, leader
// or standby, so that `walcast status` lists the standbys of a pipeline
// and every process counts the instances running the same pipelines, to
// lead only its fair share of them. A process that dies loses its presence
// the way it loses its leadership: with its session.
type Presence struct {
	cfg       Config
	pipelines []string
	mu        sync.Mutex
	conn      *pgx.Conn // nil until (re)connected
}

// Join opens the presence session for pipelines (all on cfg.DSN; Pipeline
// is ignored). It fails only when the source cannot be reached.
func Join(ctx context.Context, cfg Config, pipelines []string) (*Presence, error) {
	cfg.defaults()
	p := &Presence{cfg: cfg, pipelines: pipelines}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Presence) connect(ctx context.Context) error {
	cfg := p.cfg
	cfg.Pipeline = fmt.Sprintf("%d pipelines (presence)", len(p.pipelines))
	conn, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock_shared($1, k) FROM unnest($2::int[]) k`, int32(presenceClass), presenceKeys(p.pipelines)); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("announce this walcast's pipelines: %w", err)
	}
	p.conn = conn
	return nil
}

// Loads returns, for every process present for any of this process's
// pipelines (itself included), how many of them it leads; the processes
// are named by their Holder. The session is reopened if it was lost.
func (p *Presence) Loads(ctx context.Context) (map[string]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil || p.conn.IsClosed() {
		p.conn = nil
		if err := p.connect(ctx); err != nil {
			return nil, err
		}
	}
	class, _ := Keys("")
	rows, err := p.conn.Query(ctx, `
WITH held AS (
  SELECT l.classid, l.objid, a.application_name AS name
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
    AND l.objid = ANY(SELECT k::oid FROM unnest($3::int[]) k)
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
SELECT p.name, (SELECT count(*) FROM held h WHERE h.classid = $2::int::oid AND h.name = p.name)
FROM (SELECT DISTINCT name FROM held WHERE classid = $1::int::oid) p`,
		int32(presenceClass), class, presenceKeys(p.pipelines))
	if err != nil {
		p.conn.Close(context.WithoutCancel(ctx))
		p.conn = nil
		return nil, fmt.Errorf("count the walcast instances: %w", err)
	}
	loads := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("count the walcast instances: %w", err)
		}
		loads[name] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count the walcast instances: %w", err)
	}
	return loads, nil
}

// Close ends the presence session.
func (p *Presence) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	err := p.conn.Close(ctx)
	p.conn = nil
	return err
}

// Standbys lists the processes present for pipeline that do not lead it
// (whose presence session's name differs from the leader's). db is any
// connection to the source database.
func Standbys(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, pipeline, leaderName string) ([]Holder, error) {
	rows, err := db.Query(ctx, `
SELECT a.pid, a.application_name, a.backend_start
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::int::oid AND l.objid = $2::int::oid AND l.objsubid = 2
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND a.application_name <> $3
ORDER BY a.backend_start`, int32(presenceClass), presenceKeys([]string{pipeline})[0], leaderName)
	if err != nil {
		return nil, fmt.Errorf("list the standbys of pipeline %s: %w", pipeline, err)
	}
	hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Holder, error) {
		var h Holder
		err := r.Scan(&h.PID, &h.Name, &h.Since)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("list the standbys of pipeline %s: %w", pipeline, err)
	}
	return hs, nil
}
