package checkpoint

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// parkedDDL is applied by Init with the rest of the schema.
const parkedDDL = `
CREATE TABLE IF NOT EXISTS walcast.parked (
	pipeline        text NOT NULL,
	sink            text NOT NULL,
	event_id        text NOT NULL,
	commit_lsn      pg_lsn NOT NULL,
	idx             bigint NOT NULL,
	row_key         text NOT NULL,
	schema_name     text NOT NULL,
	table_name      text NOT NULL,
	op              text NOT NULL,
	key             bytea NOT NULL,
	payload         bytea NOT NULL,
	attempts        int NOT NULL,
	last_error      text NOT NULL,
	first_failed_at timestamptz NOT NULL,
	last_failed_at  timestamptz NOT NULL,
	PRIMARY KEY (pipeline, sink, commit_lsn, idx)
);
CREATE INDEX IF NOT EXISTS parked_row ON walcast.parked (pipeline, sink, row_key, commit_lsn, idx);
CREATE TABLE IF NOT EXISTS walcast.replay_requests (
	id           bigserial PRIMARY KEY,
	pipeline     text NOT NULL,
	sink         text NOT NULL,
	event_id     text,
	requested_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS walcast.usage (
	pipeline  text NOT NULL,
	sink      text NOT NULL,
	hour      timestamptz NOT NULL,
	attempts  bigint NOT NULL DEFAULT 0,
	delivered bigint NOT NULL DEFAULT 0,
	failed    bigint NOT NULL DEFAULT 0,
	bytes     bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (pipeline, sink, hour)
);
`

// parkedOldRowDDL: old_row_key is the row an update moved away from (it
// changed the key); the event is parked under both rows. Empty for every
// other event.
const parkedOldRowDDL = `
ALTER TABLE walcast.parked ADD COLUMN IF NOT EXISTS old_row_key text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS parked_old_row ON walcast.parked (pipeline, sink, old_row_key) WHERE old_row_key <> '';
`

// Parked is an event a sink gave up on after max_attempts, with what is
// needed to deliver it again later.
type Parked struct {
	Sink  string
	Event cdc.Event
	Row   string
	// OldRow is the row an update moved away from when it changed the
	// key: the event belongs to, and holds back, both rows. Empty for
	// every other event.
	OldRow       string
	Attempts     int
	LastError    string
	FirstFailure time.Time
	LastFailure  time.Time
}

// Park records events as parked in one statement, so that a write cut
// short (the process killed, the connection or the leadership lost, the
// caller giving up) leaves all of them or none: a row's events are parked
// behind its first failure, and a part of them on record would let a
// restarted scheduler deliver the rest out of order. An event parked again
// (its replay failed) has its attempts and error updated; an event listed
// twice is recorded once, as its last listing says.
func (s *Store) Park(ctx context.Context, ps []Parked) error {
	if len(ps) == 0 {
		return nil
	}
	// ON CONFLICT DO UPDATE refuses to change one row twice in a statement.
	type key struct {
		sink string
		id   cdc.EventID
	}
	at := make(map[key]int, len(ps))
	var u parkedColumns
	for _, p := range ps {
		k := key{p.Sink, p.Event.ID}
		if i, ok := at[k]; ok {
			u.set(i, p)
			continue
		}
		at[k] = len(u.sinks)
		u.add(p)
	}
	_, err := s.db.Exec(ctx, `
INSERT INTO walcast.parked AS p (pipeline, sink, event_id, commit_lsn, idx, row_key, schema_name, table_name, op, key, payload,
	attempts, last_error, first_failed_at, last_failed_at, old_row_key)
SELECT $1, u.sink, u.event_id, u.lsn::pg_lsn, u.idx, u.row_key, u.schema_name, u.table_name, u.op, u.key, u.payload,
	u.attempts, u.last_error, u.first_failed_at, u.last_failed_at, u.old_row_key
FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bytea[], $11::bytea[],
	$12::int[], $13::text[], $14::timestamptz[], $15::timestamptz[], $16::text[])
	AS u(sink, event_id, lsn, idx, row_key, schema_name, table_name, op, key, payload, attempts, last_error, first_failed_at, last_failed_at, old_row_key)
ON CONFLICT (pipeline, sink, commit_lsn, idx) DO UPDATE
SET attempts = p.attempts + excluded.attempts, last_error = excluded.last_error, last_failed_at = excluded.last_failed_at`,
		s.pipeline, u.sinks, u.ids, u.lsns, u.idxs, u.rows, u.schemas, u.tables, u.ops, u.keys, u.payloads,
		u.attempts, u.errs, u.first, u.last, u.oldRows)
	if err != nil {
		first := ps[0]
		return fmt.Errorf("park %d events of sink %s from %s on (none is parked; retry): %w", len(u.sinks), first.Sink, first.Event.ID, err)
	}
	return nil
}

// parkedColumns holds a Park's records column by column, for unnest.
type parkedColumns struct {
	sinks, ids, lsns, rows, schemas, tables, ops, errs, oldRows []string
	idxs                                                        []int64
	keys, payloads                                              [][]byte
	attempts                                                    []int32
	first, last                                                 []time.Time
}

func (u *parkedColumns) add(p Parked) {
	e := p.Event
	u.sinks = append(u.sinks, p.Sink)
	u.ids = append(u.ids, e.ID.String())
	u.lsns = append(u.lsns, cdc.FormatLSN(e.ID.CommitLSN))
	u.idxs = append(u.idxs, int64(e.ID.Index))
	u.rows = append(u.rows, p.Row)
	u.schemas = append(u.schemas, e.Schema)
	u.tables = append(u.tables, e.Table)
	u.ops = append(u.ops, string(e.Op))
	// An element that is nil would be NULL, which the columns refuse.
	u.keys = append(u.keys, notNil(e.Key))
	u.payloads = append(u.payloads, notNil(e.Payload))
	u.attempts = append(u.attempts, int32(p.Attempts))
	u.errs = append(u.errs, p.LastError)
	u.first = append(u.first, p.FirstFailure)
	u.last = append(u.last, p.LastFailure)
	u.oldRows = append(u.oldRows, p.OldRow)
}

// set replaces record i with p (the same event, listed again).
func (u *parkedColumns) set(i int, p Parked) {
	var one parkedColumns
	one.add(p)
	u.rows[i], u.oldRows[i], u.keys[i], u.payloads[i] = one.rows[0], one.oldRows[0], one.keys[0], one.payloads[0]
	u.schemas[i], u.tables[i], u.ops[i] = one.schemas[0], one.tables[0], one.ops[0]
	u.attempts[i], u.errs[i], u.first[i], u.last[i] = one.attempts[0], one.errs[0], one.first[0], one.last[0]
}

func notNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Unpark deletes parked events that were delivered on replay.
func (s *Store) Unpark(ctx context.Context, sink string, ids []cdc.EventID) error {
	if len(ids) == 0 {
		return nil
	}
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = id.String()
	}
	if _, err := s.db.Exec(ctx, `DELETE FROM walcast.parked WHERE pipeline = $1 AND sink = $2 AND event_id = ANY($3)`,
		s.pipeline, sink, strs); err != nil {
		return fmt.Errorf("remove replayed events of sink %s from walcast.parked: %w", sink, err)
	}
	return nil
}

// ParkedRows returns the rows of sink that have parked events (an update
// that changed the key counts for both its rows): later events of those
// rows are parked behind them.
func (s *Store) ParkedRows(ctx context.Context, sink string) ([]string, error) {
	rows, err := s.db.Query(ctx, `
SELECT row_key FROM walcast.parked WHERE pipeline = $1 AND sink = $2
UNION
SELECT old_row_key FROM walcast.parked WHERE pipeline = $1 AND sink = $2 AND old_row_key <> ''`, s.pipeline, sink)
	if err != nil {
		return nil, fmt.Errorf("load parked rows of sink %s: %w", sink, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ListParked returns the parked events of sink (every sink when empty),
// oldest first per row; row limits the result to one row when not empty
// (with the updates that moved a key away from it).
func (s *Store) ListParked(ctx context.Context, sink, row string) ([]Parked, error) {
	rows, err := s.db.Query(ctx, `
SELECT sink, commit_lsn::text AS lsn_text, idx, row_key, old_row_key, schema_name, table_name, op, key, payload, attempts, last_error,
	first_failed_at, last_failed_at
FROM walcast.parked
WHERE pipeline = $1 AND ($2 = '' OR sink = $2) AND ($3 = '' OR row_key = $3 OR old_row_key = $3)
ORDER BY sink, commit_lsn, idx`, s.pipeline, sink, row)
	if err != nil {
		return nil, fmt.Errorf("list parked events: %w", err)
	}
	return scanParked(rows)
}

// ListParkedTable returns the parked events of one table of sink, oldest
// first: a replay needs them all to deliver, before an event, whatever
// the table's truncates order before it.
func (s *Store) ListParkedTable(ctx context.Context, sink, schema, table string) ([]Parked, error) {
	rows, err := s.db.Query(ctx, `
SELECT sink, commit_lsn::text AS lsn_text, idx, row_key, old_row_key, schema_name, table_name, op, key, payload, attempts, last_error,
	first_failed_at, last_failed_at
FROM walcast.parked
WHERE pipeline = $1 AND sink = $2 AND schema_name = $3 AND table_name = $4
ORDER BY commit_lsn, idx`, s.pipeline, sink, schema, table)
	if err != nil {
		return nil, fmt.Errorf("list parked events of %s.%s: %w", schema, table, err)
	}
	return scanParked(rows)
}

// RecentParked returns the limit most recently failed parked events of
// the pipeline, newest failure first: what an operator looks at first,
// without loading every payload of a sink that parked thousands.
func (s *Store) RecentParked(ctx context.Context, limit int) ([]Parked, error) {
	rows, err := s.db.Query(ctx, `
SELECT sink, commit_lsn::text AS lsn_text, idx, row_key, old_row_key, schema_name, table_name, op, key, payload, attempts, last_error,
	first_failed_at, last_failed_at
FROM walcast.parked
WHERE pipeline = $1
ORDER BY last_failed_at DESC, sink, commit_lsn, idx
LIMIT $2`, s.pipeline, limit)
	if err != nil {
		return nil, fmt.Errorf("list recently parked events: %w", err)
	}
	return scanParked(rows)
}

func scanParked(rows pgx.Rows) ([]Parked, error) {
	defer rows.Close()
	var out []Parked
	for rows.Next() {
		var p Parked
		var lsn, op string
		var idx int64
		if err := rows.Scan(&p.Sink, &lsn, &idx, &p.Row, &p.OldRow, &p.Event.Schema, &p.Event.Table, &op, &p.Event.Key, &p.Event.Payload,
			&p.Attempts, &p.LastError, &p.FirstFailure, &p.LastFailure); err != nil {
			return nil, fmt.Errorf("list parked events: %w", err)
		}
		l, err := cdc.ParseLSN(lsn)
		if err != nil {
			return nil, err
		}
		p.Event.ID = cdc.EventID{CommitLSN: l, Index: uint64(idx)}
		p.Event.Op = cdc.Op(op)
		out = append(out, p)
	}
	return out, rows.Err()
}

// ParkedSummary is one sink's parked events in brief.
type ParkedSummary struct {
	Count int
	// LastError and LastFailure are those of the most recently failed
	// parked event.
	LastError   string
	LastFailure time.Time
}

// SummarizeParked returns, for each sink with parked events, how many it
// has and its latest error.
func (s *Store) SummarizeParked(ctx context.Context) (map[string]ParkedSummary, error) {
	rows, err := s.db.Query(ctx, `
SELECT DISTINCT ON (sink) sink, count(*) OVER (PARTITION BY sink), last_error, last_failed_at
FROM walcast.parked
WHERE pipeline = $1
ORDER BY sink, last_failed_at DESC, commit_lsn DESC, idx DESC`, s.pipeline)
	if err != nil {
		return nil, fmt.Errorf("summarize parked events: %w", err)
	}
	defer rows.Close()
	out := map[string]ParkedSummary{}
	for rows.Next() {
		var sink string
		var ps ParkedSummary
		if err := rows.Scan(&sink, &ps.Count, &ps.LastError, &ps.LastFailure); err != nil {
			return nil, fmt.Errorf("summarize parked events: %w", err)
		}
		out[sink] = ps
	}
	return out, rows.Err()
}

// ParkedRowOf returns the row of a parked event, or "" when it is not parked.
func (s *Store) ParkedRowOf(ctx context.Context, sink string, id cdc.EventID) (string, error) {
	rows, err := s.db.Query(ctx, `SELECT row_key FROM walcast.parked WHERE pipeline = $1 AND sink = $2 AND commit_lsn = $3::pg_lsn AND idx = $4`,
		s.pipeline, sink, cdc.FormatLSN(id.CommitLSN), int64(id.Index))
	if err != nil {
		return "", fmt.Errorf("look up parked event %s: %w", id, err)
	}
	defer rows.Close()
	var row string
	for rows.Next() {
		if err := rows.Scan(&row); err != nil {
			return "", err
		}
	}
	return row, rows.Err()
}

// ReplayRequest asks a running daemon to replay parked events.
type ReplayRequest struct {
	Sink string
	// ID names one parked event (its row is replayed from its oldest
	// parked event on); zero means every parked event of the sink.
	ID cdc.EventID
	// Seq is the request's id in walcast.replay_requests (set by
	// ReplayRequests; RequestReplay ignores it).
	Seq int64
}

// RequestReplay stores a replay request and wakes the daemon.
func (s *Store) RequestReplay(ctx context.Context, r ReplayRequest) error {
	var id *string
	if !r.ID.IsZero() {
		v := r.ID.String()
		id = &v
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO walcast.replay_requests (pipeline, sink, event_id) VALUES ($1, $2, $3)`, s.pipeline, r.Sink, id); err != nil {
		return fmt.Errorf("request replay: %w", err)
	}
	return control.Notify(ctx, s.db, s.pipeline)
}

// ReplayRequests returns the pipeline's pending requests, oldest first.
// A request stays stored until DoneReplayRequest: the daemon consumes it
// only once it was handled, so a request is never lost to a crash or to a
// sink's scheduler being swapped while it waited.
func (s *Store) ReplayRequests(ctx context.Context) ([]ReplayRequest, error) {
	rows, err := s.db.Query(ctx, `SELECT id, sink, coalesce(event_id, '') FROM walcast.replay_requests WHERE pipeline = $1 ORDER BY id`, s.pipeline)
	if err != nil {
		return nil, fmt.Errorf("read replay requests: %w", err)
	}
	defer rows.Close()
	var out []ReplayRequest
	for rows.Next() {
		var r ReplayRequest
		var id string
		if err := rows.Scan(&r.Seq, &r.Sink, &id); err != nil {
			return nil, fmt.Errorf("read replay requests: %w", err)
		}
		if id != "" {
			if r.ID, err = cdc.ParseEventID(id); err != nil {
				return nil, fmt.Errorf("read replay requests: %w", err)
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read replay requests: %w", err)
	}
	return out, nil
}

// DoneReplayRequest forgets a handled request.
func (s *Store) DoneReplayRequest(ctx context.Context, seq int64) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM walcast.replay_requests WHERE pipeline = $1 AND id = $2`, s.pipeline, seq); err != nil {
		return fmt.Errorf("forget replay request %d: %w", seq, err)
	}
	return nil
}
