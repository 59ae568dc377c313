package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// rowOp is one event of mirror mode resolved against its target table:
// a truncate, or a row to delete and/or a row to upsert (an update that
// changes the key does both).
type rowOp struct {
	index int // in the batch
	t     *table

	truncate                 bool
	cascade, restartIdentity bool

	del   []byte // JSON object holding the primary key of a row to delete
	delID string // that row's identity
	up    []byte // JSON object of the row to insert or update
	upID  string
	cols  []string // the members of up, in order

	// marker is resync_begin or resync_end of resync (resync.go).
	marker cdc.Op
	resync int64
}

// resolution is what resolve makes of a batch: the ops of its first cut
// events, and why event cut, if any, cannot be applied.
type resolution struct {
	ops    []rowOp
	cut    int
	cutErr error
}

// resolve turns events into ops, creating and widening target tables as
// create_tables allows. It stops at the first event that cannot be
// applied whatever is retried (a missing table or column, a table without
// a primary key): the host delivers every later event again after it
// (Info.Ordered), so nothing past it is needed. err is a failure of the
// batch as a whole (the catalog could not be read).
func (s *Sink) resolve(ctx context.Context, events []pluginkit.Event) (resolution, error) {
	res := resolution{ops: make([]rowOp, 0, len(events)), cut: len(events)}
	for i := range events {
		op, err := s.resolveOne(ctx, &events[i])
		if r, ok := errors.AsType[*refusal](err); ok {
			res.cut, res.cutErr = i, pluginkit.Permanent(fmt.Errorf("event %s (%s.%s %s): %w", events[i].ID, events[i].Schema, events[i].Table, events[i].Op, r.err))
			return res, nil
		}
		if err != nil {
			return res, err
		}
		if op != nil {
			op.index = i
			res.ops = append(res.ops, *op)
		}
	}
	return res, nil
}

// refusal is an event the target cannot take as it is: retrying cannot
// help until someone changes the target or the source.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }

func refuse(format string, args ...any) error { return &refusal{fmt.Errorf(format, args...)} }

// resolveOne resolves one event. It returns a nil op for an event with
// nothing to do (a truncate of a table not created yet), and a *refusal
// for an event the target cannot take as it is.
func (s *Sink) resolveOne(ctx context.Context, e *pluginkit.Event) (*rowOp, error) {
	if e.Op == pluginkit.OpResyncBegin || e.Op == pluginkit.OpResyncEnd {
		return s.markerOp(ctx, e)
	}
	if e.Op == pluginkit.OpMessage {
		// An application message changes no table: a mirror has nothing
		// to apply.
		return nil, nil
	}
	if e.Op == pluginkit.OpDetach {
		// on_detach = "event" asks for the partition's rows to stay in
		// every copy: the event says they left the source table, and a
		// mirror that must follow asks for on_detach = "delete".
		return nil, nil
	}
	if e.Op == pluginkit.OpSchema {
		// Mirror mode takes a table's columns from its rows (adding
		// what is missing with create_tables); a change of shape alone
		// changes no row.
		return nil, nil
	}
	name := s.cfg.targetOf(e.Schema + "." + e.Table)
	newRow, oldRow, err := rows(e)
	if err != nil {
		return nil, refuse("read the event: %w", err)
	}
	key := nullable(e.Key)
	// The new row's columns are the upsert's; the old row's and the key's
	// must exist in the target too. Each JSON value is walked once: this
	// is most of the sink's CPU.
	newNames, err := memberNames(newRow)
	if err != nil {
		return nil, refuse("read the event: %w", err)
	}
	others, err := memberNames(oldRow, key)
	if err != nil {
		return nil, refuse("read the event: %w", err)
	}
	names := slices.Clip(newNames) // appending copies: newNames stays the new row's
	for _, n := range others {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	t, err := s.table(ctx, name)
	if err != nil {
		return nil, err
	}
	if t == nil {
		if e.Op == pluginkit.OpTruncate && s.cfg.create {
			return nil, nil
		}
		if t, err = s.createFor(ctx, name, e, names); err != nil {
			return nil, err
		}
	}
	if len(t.pk) == 0 {
		return nil, refuse("target table %s has no primary key: mirror mode upserts and deletes by it; add one on the columns of the source's replica identity", name)
	}
	if e.Op == pluginkit.OpTruncate {
		return &rowOp{t: t, truncate: true, cascade: isTrue(e, "cascade"), restartIdentity: isTrue(e, "restart_identity")}, nil
	}
	if missing := t.missing(names); len(missing) > 0 {
		if !s.cfg.create {
			return nil, refuse("target table %s has no column %s, which the source sends: add it (ALTER TABLE %s ADD COLUMN ...), or set create_tables = true to have it added as jsonb",
				name, strings.Join(missing, ", "), name)
		}
		if t, err = s.widen(ctx, t, missing); err != nil {
			return nil, err
		}
	}
	return buildOp(t, e, newRow, oldRow, key, newNames)
}

// createFor creates the target table of e (create_tables) from its
// columns, or refuses e when the table may not be created or has no key.
func (s *Sink) createFor(ctx context.Context, name qname, e *pluginkit.Event, names []string) (*table, error) {
	if !s.cfg.create {
		return nil, refuse("target table %s does not exist: create it (pg_dump --schema-only --table=%s.%s of the source gives its definition), or set create_tables = true",
			name, e.Schema, e.Table)
	}
	keyNames, err := memberNames(nullable(e.Key))
	if err != nil {
		return nil, refuse("read the event's key: %w", err)
	}
	if len(keyNames) == 0 {
		return nil, refuse("table %s.%s has no key (no primary key or replica identity index), so its rows cannot be mirrored: give it a primary key, or use mode = \"history\"", e.Schema, e.Table)
	}
	if err := createTable(ctx, s.pool, name, names, keyNames); err != nil {
		return nil, err
	}
	s.log.Info("created target table", "table", name.String(), "columns", len(names), "primary_key", strings.Join(keyNames, ","))
	s.forget(name)
	t, err := s.table(ctx, name)
	if err == nil && t == nil {
		err = fmt.Errorf("table %s is missing right after it was created", name)
	}
	return t, err
}

// widen adds missing columns to t as jsonb and returns it read again.
func (s *Sink) widen(ctx context.Context, t *table, missing []string) (*table, error) {
	if err := addColumns(ctx, s.pool, t.name, missing); err != nil {
		return nil, err
	}
	s.log.Warn("added columns to target table", "table", t.name.String(), "columns", strings.Join(missing, ","), "type", "jsonb")
	s.forget(t.name)
	return s.table(ctx, t.name)
}

// buildOp makes the op of an insert, update, read or delete; newNames
// are the new row's members.
func buildOp(t *table, e *pluginkit.Event, newRow, oldRow, key []byte, newNames []string) (*rowOp, error) {
	op := &rowOp{t: t}
	var err error
	switch e.Op {
	case pluginkit.OpInsert, pluginkit.OpRead, pluginkit.OpUpdate:
		if newRow == nil {
			return nil, refuse("a %s without a new row", e.Op)
		}
		op.up = newRow
		if op.upID, err = t.identity(newRow); err != nil {
			return nil, err
		}
		op.cols = newNames
		// An update that changes the key moves the row: the old key's
		// row goes. old holds the old key (all of the row with
		// REPLICA IDENTITY FULL).
		if e.Op == pluginkit.OpUpdate && oldRow != nil {
			if oldID, err := t.identity(oldRow); err == nil && oldID != op.upID {
				op.del, op.delID = oldRow, oldID
			}
		}
	case pluginkit.OpDelete:
		row := cmpBytes(oldRow, key)
		if row == nil {
			return nil, refuse("a delete without a key: the source table needs a primary key or replica identity")
		}
		op.del = row
		if op.delID, err = t.identity(row); err != nil {
			return nil, err
		}
	default:
		return nil, refuse("operation %q is not one mirror mode applies", e.Op)
	}
	return op, nil
}

// identity is the row's primary key values, as raw JSON, which the host
// encodes the same way each time for the same value.
func (t *table) identity(row []byte) (string, error) {
	var b strings.Builder
	for _, c := range t.pk {
		v, ok := cdc.Member(row, c)
		if !ok {
			return "", refuse("the event does not carry column %s of target table %s's primary key: make the target's primary key the source's replica identity columns", c, t.name)
		}
		b.Write(v)
		b.WriteByte(0)
	}
	return b.String(), nil
}

// missing returns the names the table has no column for.
func (t *table) missing(names []string) []string {
	var out []string
	for _, n := range names {
		if _, ok := t.cols[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// segment gathers ops on distinct rows, which commute: each table's
// deletes and upserts then go in one statement per column set, one round
// trip for the whole segment. An op on a row the segment already holds
// starts a new segment, and a truncate is applied between two.
type segment struct {
	touched map[string]bool // table, NUL, row identity
	tables  []*tableSeg
	// open are the resyncs open: the rows of their tables the segment
	// applies leave the tables' pending keys (in pendingSchema).
	open          resyncs
	pendingSchema string
}

type tableSeg struct {
	t       *table
	dels    [][]byte
	ups     map[string]*upGroup // by column set
	upOrder []string
}

type upGroup struct {
	cols []string
	rows [][]byte
}

// apply applies ops, in order, in tx; open are the resyncs open as tx
// began, updated by the markers among ops.
func (s *Sink) apply(ctx context.Context, tx pgx.Tx, ops []rowOp, open resyncs) error {
	seg := &segment{touched: map[string]bool{}, open: open, pendingSchema: s.cfg.checkpointTable.schema}
	for i := range ops {
		op := &ops[i]
		if op.marker != "" {
			if err := seg.flush(ctx, tx); err != nil {
				return err
			}
			if err := s.applyMarker(ctx, tx, op, open); err != nil {
				return err
			}
			continue
		}
		if op.truncate {
			if err := seg.flush(ctx, tx); err != nil {
				return err
			}
			if err := truncate(ctx, tx, op); err != nil {
				return err
			}
			continue
		}
		if !seg.fits(op) {
			if err := seg.flush(ctx, tx); err != nil {
				return err
			}
		}
		seg.add(op)
	}
	return seg.flush(ctx, tx)
}

func truncate(ctx context.Context, tx pgx.Tx, op *rowOp) error {
	sql := "TRUNCATE " + op.t.name.sql()
	if op.restartIdentity {
		sql += " RESTART IDENTITY"
	}
	if op.cascade {
		sql += " CASCADE"
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("truncate %s: %w", op.t.name, err)
	}
	return nil
}

func (g *segment) fits(op *rowOp) bool {
	prefix := op.t.name.String() + "\x00"
	return !(op.del != nil && g.touched[prefix+op.delID]) && !(op.up != nil && g.touched[prefix+op.upID])
}

func (g *segment) add(op *rowOp) {
	prefix := op.t.name.String() + "\x00"
	var ts *tableSeg
	for _, x := range g.tables {
		if x.t == op.t {
			ts = x
		}
	}
	if ts == nil {
		ts = &tableSeg{t: op.t, ups: map[string]*upGroup{}}
		g.tables = append(g.tables, ts)
	}
	if op.del != nil {
		g.touched[prefix+op.delID] = true
		ts.dels = append(ts.dels, op.del)
	}
	if op.up != nil {
		g.touched[prefix+op.upID] = true
		set := strings.Join(op.cols, "\x00")
		grp := ts.ups[set]
		if grp == nil {
			grp = &upGroup{cols: op.cols}
			ts.ups[set] = grp
			ts.upOrder = append(ts.upOrder, set)
		}
		grp.rows = append(grp.rows, op.up)
	}
}

// flush sends the segment's statements in one round trip and empties it.
func (g *segment) flush(ctx context.Context, tx pgx.Tx) error {
	if len(g.tables) == 0 {
		return nil
	}
	var b pgx.Batch
	for _, ts := range g.tables {
		var seen [][]byte
		if len(ts.dels) > 0 {
			b.Queue(ts.t.deleteSQL(), jsonArray(ts.dels))
			seen = append(seen, ts.dels...)
		}
		for _, set := range ts.upOrder {
			grp := ts.ups[set]
			b.Queue(ts.t.upsertSQL(grp.cols), jsonArray(grp.rows))
			seen = append(seen, grp.rows...)
		}
		if o, ok := g.open[ts.t.name.String()]; ok {
			b.Queue(ts.t.seenSQL(qname{g.pendingSchema, o.Pending}), jsonArray(seen))
		}
	}
	g.tables = g.tables[:0]
	clear(g.touched)
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("apply rows: %w", err)
	}
	return nil
}

// jsonArray joins JSON values into one JSON array, as a string (sent as
// text, cast to jsonb by the statement).
func jsonArray(vals [][]byte) string {
	n := 2
	for _, v := range vals {
		n += len(v) + 1
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(v)
	}
	b.WriteByte(']')
	return b.String()
}

// rows reads the envelope's new and old rows (nil when absent or null)
// in one walk over it.
func rows(e *pluginkit.Event) (newRow, oldRow []byte, err error) {
	err = cdc.EachMember(e.Payload, func(name, v []byte) error {
		switch string(name) {
		case "new":
			newRow = nullable(v)
		case "old":
			oldRow = nullable(v)
		}
		return nil
	})
	return newRow, oldRow, err
}

func nullable(v []byte) []byte {
	if len(v) == 0 || bytes.Equal(v, []byte("null")) {
		return nil
	}
	return v
}

func cmpBytes(a, b []byte) []byte {
	if a != nil {
		return a
	}
	return b
}

func isTrue(e *pluginkit.Event, name string) bool {
	v, _ := e.Member(name)
	return bytes.Equal(v, []byte("true"))
}

// memberNames lists the member names of JSON objects (nil ones skipped),
// each once, in order of appearance.
func memberNames(objs ...[]byte) ([]string, error) {
	var out []string
	for _, obj := range objs {
		if obj == nil {
			continue
		}
		err := cdc.EachMember(obj, func(name, _ []byte) error {
			n := string(name)
			if bytes.IndexByte(name, '\\') >= 0 {
				if err := json.Unmarshal([]byte(`"`+n+`"`), &n); err != nil {
					return err
				}
			}
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
