package parking

import (
	"context"
	"fmt"
	"time"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Store reads and writes one pipeline's parked events and replay
// requests.
type Store struct {
	db       control.Querier
	pipeline string
}

// New returns the parked events and replay requests of pipeline, read
// and written on db.
func New(db control.Querier, pipeline string) *Store {
	return &Store{db: db, pipeline: pipeline}
}

// Event is an event a sink gave up on after max_attempts, with what is
// needed to deliver it again later.
type Event struct {
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
func (s *Store) Park(ctx context.Context, ps []Event) error {
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

func (u *parkedColumns) add(p Event) {
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
func (u *parkedColumns) set(i int, p Event) {
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
