package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Mirror mode sweeps at a resync's end the rows the source no longer has
// (docs/guarantees.md, "Resync: the marker contract"). At resync_begin
// the primary keys the target table holds are copied into a pending
// table of their own, next to the checkpoint table; every row the sink
// applies while the resync is open (upserted or deleted) leaves it; at
// resync_end the rows still pending were not seen since the begin, and
// are deleted from the target, and the pending table is dropped. Each
// step commits with the checkpoint, in the batch's transaction, so a
// crash repeats none of it and loses none of it. The open resyncs of the
// sink are rows of the resyncs table (resyncsTable), read with the
// checkpoint under its lock.

// openResync is a resync open on one target table: its id and the table
// of the keys not seen since its begin.
type openResync struct {
	Target  string `json:"target"`
	Resync  int64  `json:"resync"`
	Pending string `json:"pending"`
}

// resyncs are the sink's open resyncs by target table (qname.String()),
// as its transaction sees them.
type resyncs map[string]openResync

// resyncsTable is the table of open resyncs, next to the checkpoint table.
func (s *Sink) resyncsTable() qname {
	ct := s.cfg.checkpointTable
	return qname{ct.schema, ct.name + "_resyncs"}
}

// createResyncsTable creates the table of open resyncs (Open).
func (s *Sink) createResyncsTable(ctx context.Context, q querier) error {
	rt := s.resyncsTable()
	_, err := q.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
			key text NOT NULL,
			target text NOT NULL,
			resync bigint NOT NULL,
			pending text NOT NULL,
			PRIMARY KEY (key, target))`, rt.sql()))
	if err != nil {
		return fmt.Errorf("create resync table %s: %w", rt, err)
	}
	return nil
}

// openResyncsSQL is the subquery that reads the sink's open resyncs as a
// JSON array ($1 is the checkpoint key), read with the checkpoint.
func (s *Sink) openResyncsSQL() string {
	return fmt.Sprintf(`(SELECT coalesce(jsonb_agg(jsonb_build_object('target', target, 'resync', resync, 'pending', pending)), '[]')::text FROM %s WHERE key = $1)`,
		s.resyncsTable().sql())
}

func parseResyncs(raw string) (resyncs, error) {
	var list []openResync
	if err := json.Unmarshal([]byte(raw), &list); err != nil {
		return nil, fmt.Errorf("read open resyncs: %w", err)
	}
	out := resyncs{}
	for _, o := range list {
		out[o.Target] = o
	}
	return out, nil
}

// markerOp resolves a resync marker: nil (nothing to do) for a table the
// target does not have, since every row it will have arrives after the
// begin.
func (s *Sink) markerOp(ctx context.Context, e *pluginkit.Event) (*rowOp, error) {
	raw, ok := e.Member("resync")
	if !ok {
		return nil, refuse("a %s without the resync's id", e.Op)
	}
	var id int64
	if err := json.Unmarshal(raw, &id); err != nil {
		return nil, refuse("a %s with resync %s: %w", e.Op, raw, err)
	}
	t, err := s.table(ctx, s.cfg.targetOf(e.Schema+"."+e.Table))
	if err != nil || t == nil {
		return nil, err
	}
	if len(t.pk) == 0 {
		return nil, refuse("target table %s has no primary key: mirror mode upserts and deletes by it; add one on the columns of the source's replica identity", t.name)
	}
	return &rowOp{t: t, marker: e.Op, resync: id}, nil
}

// pendingTable names the pending keys of resync id on target t for this
// sink: the checkpoint key and the target are hashed into the name, so
// two sinks sharing the checkpoint table never share one.
func (s *Sink) pendingTable(t *table, id int64) qname {
	h := fnv.New32a()
	h.Write([]byte(s.cfg.checkpointKey + "\x00" + t.name.String()))
	return qname{s.cfg.checkpointTable.schema, fmt.Sprintf("%s_r%d_%08x", s.cfg.checkpointTable.name, id, h.Sum32())}
}

// applyMarker opens or closes a resync in tx and records it in open.
func (s *Sink) applyMarker(ctx context.Context, tx pgx.Tx, op *rowOp, open resyncs) error {
	target := op.t.name.String()
	cur, isOpen := open[target]
	switch {
	case op.marker == cdc.OpResyncBegin && isOpen && cur.Resync == op.resync:
		return nil
	case op.marker == cdc.OpResyncBegin:
		return s.beginResync(ctx, tx, op, open)
	case !isOpen || cur.Resync != op.resync:
		// The end of a resync replaced by a later one, or whose begin
		// this target never had: nothing is known unseen.
		return nil
	}
	pending := qname{s.cfg.checkpointTable.schema, cur.Pending}
	var match []string
	for _, c := range op.t.pk {
		match = append(match, fmt.Sprintf("t.%[1]s = p.%[1]s", quoteIdent(c)))
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s AS t USING %s AS p WHERE %s", op.t.name.sql(), pending.sql(), strings.Join(match, " AND ")))
	if err != nil {
		return fmt.Errorf("resync %d: delete the rows of %s not seen since its begin: %w", op.resync, op.t.name, err)
	}
	if err := s.closeResync(ctx, tx, cur); err != nil {
		return err
	}
	delete(open, target)
	s.log.Info("resync end: deleted the rows the source no longer has", "table", target, "resync", op.resync, "deleted", tag.RowsAffected())
	return nil
}

// beginResync copies the target's keys into a new pending table, after
// closing (without a sweep) a resync still open on it.
func (s *Sink) beginResync(ctx context.Context, tx pgx.Tx, op *rowOp, open resyncs) error {
	target := op.t.name.String()
	if cur, ok := open[target]; ok {
		if err := s.closeResync(ctx, tx, cur); err != nil {
			return err
		}
	}
	pending := s.pendingTable(op.t, op.resync)
	pk := make([]string, len(op.t.pk))
	for i, c := range op.t.pk {
		pk[i] = quoteIdent(c)
	}
	cols := strings.Join(pk, ", ")
	b := &pgx.Batch{}
	b.Queue(fmt.Sprintf("DROP TABLE IF EXISTS %s", pending.sql()))
	b.Queue(fmt.Sprintf("CREATE TABLE %s AS SELECT %s FROM %s", pending.sql(), cols, op.t.name.sql()))
	b.Queue(fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (%s)", pending.sql(), cols))
	b.Queue(fmt.Sprintf(`INSERT INTO %s (key, target, resync, pending) VALUES ($1, $2, $3, $4)`, s.resyncsTable().sql()),
		s.cfg.checkpointKey, target, op.resync, pending.name)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("resync %d: record the keys %s holds: %w", op.resync, op.t.name, err)
	}
	open[target] = openResync{Target: target, Resync: op.resync, Pending: pending.name}
	s.log.Info("resync begin: the rows of the table not seen until its end will be deleted", "table", target, "resync", op.resync)
	return nil
}

// closeResync drops a resync's pending table and its record.
func (s *Sink) closeResync(ctx context.Context, tx pgx.Tx, o openResync) error {
	b := &pgx.Batch{}
	b.Queue(fmt.Sprintf("DROP TABLE IF EXISTS %s", qname{s.cfg.checkpointTable.schema, o.Pending}.sql()))
	b.Queue(fmt.Sprintf("DELETE FROM %s WHERE key = $1 AND target = $2", s.resyncsTable().sql()), s.cfg.checkpointKey, o.Target)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("resync %d: drop its pending keys: %w", o.Resync, err)
	}
	return nil
}

// seenSQL removes from a pending table the keys the JSON rows in $1 hold:
// rows the sink upserted or deleted while the resync was open.
func (t *table) seenSQL(pending qname) string {
	var sel, match []string
	for _, c := range t.pk {
		sel = append(sel, fmt.Sprintf("%s AS %s", t.cols[c].valueExpr(), quoteIdent(c)))
		match = append(match, fmt.Sprintf("p.%[1]s = k.%[1]s", quoteIdent(c)))
	}
	return fmt.Sprintf("DELETE FROM %s AS p USING (SELECT %s FROM %s) AS k WHERE %s",
		pending.sql(), strings.Join(sel, ", "), t.rowsFrom(), strings.Join(match, " AND "))
}
