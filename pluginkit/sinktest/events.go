package sinktest

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// envelope is the event JSON as the host encodes it (docs/events.md, "The
// event envelope"). The suite only needs plausible envelopes: a sink must treat the
// payload as opaque bytes, and the suite checks that it does.
type envelope struct {
	ID              string          `json:"id"`
	CommitLSN       string          `json:"commit_lsn"`
	Xid             uint32          `json:"xid"`
	CommitTime      string          `json:"commit_time"`
	Schema          string          `json:"schema"`
	Table           string          `json:"table"`
	Op              pluginkit.Op    `json:"op"`
	Key             json.RawMessage `json:"key"`
	New             json.RawMessage `json:"new"`
	Old             json.RawMessage `json:"old"`
	Unchanged       []string        `json:"unchanged,omitempty"`
	Cascade         *bool           `json:"cascade,omitempty"`
	RestartIdentity *bool           `json:"restart_identity,omitempty"`
}

// relations are the tables events are generated for: more than one schema
// and table, so that a sink routing on them is exercised.
var relations = [...]struct{ schema, table string }{
	{"public", "orders"},
	{"public", "customers"},
	{"billing", "invoices"},
}

// generator hands out events whose ids keep increasing for the whole run,
// so a sink that filters at or below a checkpoint of its own (as the Kafka
// sink does) never mistakes a fresh event of a later check for a replay.
type generator struct {
	mu   sync.Mutex
	lsn  uint64 // commit LSN of the last transaction handed out
	xid  uint32
	seq  int // drives tables, ops and keys
	base time.Time
}

func newGenerator() *generator {
	return &generator{
		// Just below 0/10000000: the LSNs soon gain a hex digit, so a sink
		// that orders or names things by the id's string form, which does
		// not sort like the id, shows it.
		lsn:  0xFFFF000,
		xid:  7400,
		base: time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC),
	}
}

// skipPast makes every later event sort after id; a sink's Open may report
// a checkpoint that the host would filter at.
func (g *generator) skipPast(id pluginkit.EventID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lsn = max(g.lsn, id.CommitLSN)
}

// next returns n events in id order, grouped into transactions of one to
// three changes, cycling through the tables and through insert, update,
// delete and (now and then) truncate.
func (g *generator) next(n int) []pluginkit.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	events := make([]pluginkit.Event, 0, n)
	for len(events) < n {
		g.lsn += 0x1A8
		g.xid++
		txSize := min(1+g.seq%3, n-len(events))
		for i := range txSize {
			events = append(events, g.event(pluginkit.EventID{CommitLSN: g.lsn, Index: uint64(i)}))
			g.seq++
		}
	}
	return events
}

// row returns n events that all change the same row, in id order: what
// the host keeps in one ordering lane.
func (g *generator) row(table, key, n int) []pluginkit.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	events := make([]pluginkit.Event, n)
	for i := range events {
		g.lsn += 0x28
		g.xid++
		events[i] = g.rowEvent(pluginkit.EventID{CommitLSN: g.lsn}, table, key, []pluginkit.Op{pluginkit.OpInsert, pluginkit.OpUpdate}[min(i, 1)])
	}
	return events
}

// event builds the event for id from the current sequence number; callers
// hold g.mu.
func (g *generator) event(id pluginkit.EventID) pluginkit.Event {
	rel := g.seq % len(relations)
	if g.seq%17 == 16 {
		return g.truncateEvent(id, rel)
	}
	ops := [...]pluginkit.Op{pluginkit.OpInsert, pluginkit.OpUpdate, pluginkit.OpDelete}
	return g.rowEvent(id, rel, 1+g.seq%11, ops[(g.seq/len(relations))%len(ops)])
}

// rowEvent builds an insert, update or delete of one row; callers hold g.mu.
func (g *generator) rowEvent(id pluginkit.EventID, rel, key int, op pluginkit.Op) pluginkit.Event {
	r := relations[rel]
	keyJSON := fmt.Appendf(nil, `{"id":%d}`, key)
	row := mustJSON(map[string]any{
		"id":     key,
		"status": []string{"new", "paid", "shipped"}[id.Index%3],
		"total":  fmt.Sprintf("%d.90", 10+key), // numeric: a string, no precision lost
		// Non-ASCII and JSON-escaped text: the bytes must arrive unchanged.
		"note": fmt.Sprintf("naïve café ☕ <%s> \"%d\"", r.table, g.seq),
	})
	env := g.envelope(id, r.schema, r.table, op)
	env.Key = keyJSON
	switch op {
	case pluginkit.OpInsert:
		env.New = row
	case pluginkit.OpUpdate:
		env.New, env.Old = row, keyJSON
		env.Unchanged = []string{"notes_blob"}
	case pluginkit.OpDelete:
		env.Old = keyJSON
	}
	return pluginkit.Event{ID: id, Schema: r.schema, Table: r.table, Op: op, Key: keyJSON, Payload: mustJSON(env)}
}

// truncateEvent builds a truncate, which has no key and no row; callers
// hold g.mu.
func (g *generator) truncateEvent(id pluginkit.EventID, rel int) pluginkit.Event {
	r := relations[rel]
	env := g.envelope(id, r.schema, r.table, pluginkit.OpTruncate)
	no := false
	env.Cascade, env.RestartIdentity = &no, &no
	return pluginkit.Event{ID: id, Schema: r.schema, Table: r.table, Op: pluginkit.OpTruncate, Key: []byte("null"), Payload: mustJSON(env)}
}

func (g *generator) envelope(id pluginkit.EventID, schema, table string, op pluginkit.Op) envelope {
	return envelope{
		ID:         id.String(),
		CommitLSN:  pluginkit.FormatLSN(id.CommitLSN),
		Xid:        g.xid,
		CommitTime: g.base.Add(time.Duration(g.xid) * time.Millisecond).Format("2006-01-02T15:04:05.000000Z07:00"),
		Schema:     schema,
		Table:      table,
		Op:         op,
		Key:        json.RawMessage("null"),
		New:        json.RawMessage("null"),
		Old:        json.RawMessage("null"),
	}
}

// mustJSON encodes values that always encode (maps of strings and numbers,
// envelopes): an error here is a bug in the suite.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("sinktest: encode generated event: %v", err))
	}
	return b
}

// payloads returns the payloads of events, in order.
func payloads(events []pluginkit.Event) [][]byte {
	p := make([][]byte, len(events))
	for i, e := range events {
		p[i] = e.Payload
	}
	return p
}
