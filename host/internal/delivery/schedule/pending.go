package schedule

import (
	"hash/maphash"
	"sort"
	"strings"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// isolation says how a failing event may be batched on its next attempt.
// A batch that fails is split so that one bad row cannot hold its
// batch-mates hostage: first into one batch per row, then, if a row's batch
// still fails, into single events. Only an event that fails on its own is
// ever parked.
type isolation uint8

const (
	batchAny isolation = iota // normal batching
	batchRow                  // only with events of its own row
	batchOne                  // alone
)

// entry is one event waiting in the scheduler.
type entry struct {
	seq ack.Seq
	// ev is the event as captured: its row, its parking, its replay.
	ev cdc.Event
	// out is the event as the sink receives it when the sink's rules
	// (Config.Rules) changed it; nil when it is ev. A pointer, not a
	// second copy of the event: an entry is allocated per event, and
	// without rules the copy was a third of its bytes (docs/benchmarks.md,
	// "Where the daemon spends its time").
	out *cdc.Event
	row string
	// table is the event's "schema.table". A barrier (a truncate) holds
	// its whole table: it waits until every earlier event of the table is
	// resolved, and no later one goes before it is resolved.
	table   string
	barrier bool
	// oldRow is the row an update moved away from (it changed the key):
	// the event belongs to both rows. It waits for both, holds both while
	// in flight, and is parked under both.
	oldRow string
	// The hashes of row, oldRow and table, for the in-flight bookkeeping
	// (set by pending.add and putBack).
	rowID, oldRowID, tableID rowID
	bytes                    int
	// queued is when the event was taken from the queue (zero for a
	// replayed one): a partial batch waits for more events at most
	// linger after its oldest event.
	queued time.Time
	// replay marks an event taken from walcast.parked by `walcast replay`:
	// it is not tracked by the ack tracker (it was resolved when parked),
	// and on success it leaves walcast.parked.
	replay bool
	// gapBefore: events were dropped for this (non-durable) sink just
	// before this one; the batch carrying it says so to the plugin.
	gapBefore bool

	// filtered and ruleErr: the sink's rules, applied again to a replayed
	// event, filter it out (it leaves walcast.parked without being sent)
	// or fail on it (it is parked again with ruleErr).
	filtered bool
	ruleErr  error

	attempts  int
	isolation isolation
	notBefore time.Time
	firstFail time.Time
	lastErr   string
}

// before orders entries by id, replayed ones among live ones: a replayed
// truncate must still wait for an earlier live event of its table that is
// pending, and a replayed event is older than every live event of its row
// (those park behind it), so id order is the order every rule wants.
func (e *entry) before(o *entry) bool {
	return e.ev.ID.Compare(o.ev.ID) < 0
}

// sent is the event as the sink receives it.
func (e *entry) sent() *cdc.Event {
	if e.out != nil {
		return e.out
	}
	return &e.ev
}

// newEntry makes the scheduler's entry for an event; oldKey is the key an
// update moved the row away from, nil when the key did not change.
func newEntry(ev cdc.Event, oldKey []byte) *entry {
	row := rowKey(ev)
	// The row starts with "schema.table\x1f": the table is a prefix of it,
	// not a second string built per event.
	e := &entry{ev: ev, row: row, table: row[:len(ev.Schema)+1+len(ev.Table)], bytes: len(ev.Payload)}
	e.barrier = ev.Op.TableWide()
	if oldKey != nil {
		e.oldRow = rowOf(ev, oldKey)
	}
	return e
}

// rowKey identifies a row: changes to the same row keep their order. The
// unit separator cannot occur in the JSON key and, unlike NUL, can be
// stored in a text column (walcast.parked.row_key). A truncate's row is
// its whole table: tableKey, a key no JSON key can be. So is a resync
// marker's: the rows a resync's end sweeps are every row of its table.
func rowKey(ev cdc.Event) string {
	if ev.Op.TableWide() {
		return rowOf(ev, []byte(tableKey))
	}
	return rowOf(ev, ev.Key)
}

// tableKey is the key part of a truncate's row.
const tableKey = "*"

// tableOf returns the table ("schema.table") of a row. The key part is
// JSON (or tableKey), which never holds a raw unit separator, so the last
// one ends the table name.
func tableOf(row string) string {
	if i := strings.LastIndexByte(row, '\x1f'); i >= 0 {
		return row[:i]
	}
	return row
}

// rowOf is the row of ev's table with the given key.
func rowOf(ev cdc.Event, key []byte) string {
	return ev.Schema + "." + ev.Table + "\x1f" + string(key)
}

// rowID is the hash of a row or a table, which the in-flight bookkeeping
// uses instead of the string: a row key is hashed once per event instead
// of at every map operation, which more than halved the scheduler's map
// work (docs/benchmarks.md, "Where the scheduler's constants come from").
// Two rows whose hashes collide only wait for each other, which can delay
// an event but never reorder one: every rule built on these maps only
// holds events back. Parking and replay, which must name rows exactly,
// keep using the strings.
type rowID uint64

// pending holds the events a sink has taken from its queue but not yet
// resolved, in order, plus the per-row state that decides what may go out.
type pending struct {
	list         []*entry
	bytes        int           // payload bytes of the entries in list
	rowsInFlight map[rowID]int // rows with a batch in flight
	// Tables with events in flight, and with a barrier in flight;
	// barriersPending counts the barriers in list (none: take skips the
	// table rules).
	tablesInFlight   map[rowID]int
	barriersInFlight map[rowID]int
	barriersPending  int
	seed             maphash.Seed
}

func newPending() *pending {
	return &pending{
		rowsInFlight: map[rowID]int{}, tablesInFlight: map[rowID]int{}, barriersInFlight: map[rowID]int{},
		seed: maphash.MakeSeed(),
	}
}

// id hashes a row or table name.
func (p *pending) id(name string) rowID { return rowID(maphash.String(p.seed, name)) }

// identify sets e's hashes.
func (p *pending) identify(e *entry) {
	e.rowID, e.tableID = p.id(e.row), p.id(e.table)
	if e.oldRow != "" {
		e.oldRowID = p.id(e.oldRow)
	}
}

func (p *pending) len() int { return len(p.list) }

// add adds a live event. Live ids arrive in order, so it is appended,
// unless a replayed event with a later id is pending (a parked event that
// PostgreSQL sent again after a restart): the list stays in id order.
func (p *pending) add(e *entry) {
	if n := len(p.list); n > 0 && e.before(p.list[n-1]) {
		p.putBack([]*entry{e})
		return
	}
	p.identify(e)
	p.list = append(p.list, e)
	p.bytes += e.bytes
	if e.barrier {
		p.barriersPending++
	}
}

// putBack re-inserts entries (a failed or throttled batch) in order.
func (p *pending) putBack(es []*entry) {
	for _, e := range es {
		p.identify(e)
		p.bytes += e.bytes
		if e.barrier {
			p.barriersPending++
		}
		i := sort.Search(len(p.list), func(i int) bool { return e.before(p.list[i]) })
		p.list = append(p.list, nil)
		copy(p.list[i+1:], p.list[i:])
		p.list[i] = e
	}
}

// limits bound a batch.
type limits struct {
	events int
	bytes  int
	strict bool // global commit order: never skip an event that cannot go
}

// take forms the next batch: events in order, skipping (unless strict) the
// rows that have a batch in flight or an event still backing off, so a
// row's events never overtake each other and never fly twice at once. A
// barrier goes only when no earlier event of its table is pending or in
// flight (not even in the same batch), and no later event of its table
// goes while it is pending or in flight. It returns nil when nothing can go
// now, plus the earliest time a backing-off event becomes ready (zero if
// none).
func (p *pending) take(now time.Time, limit limits) (batch []*entry, wake time.Time) {
	f := p.newForming(now)
	keep := p.list[:0]
	for i, e := range p.list {
		if len(f.taken) >= limit.events || (len(f.taken) > 0 && f.size+e.bytes > limit.bytes) {
			keep = append(keep, p.list[i:]...)
			break
		}
		if f.add(e) {
			continue
		}
		keep = append(keep, e)
		if limit.strict {
			keep = append(keep, p.list[i+1:]...)
			break
		}
	}
	// Drop the stale tail so landed entries (and their payloads) are not
	// kept alive by the backing array until it is overwritten.
	clear(p.list[len(keep):])
	p.list = keep
	for _, e := range f.taken {
		p.rowsInFlight[e.rowID]++
		if e.oldRow != "" {
			p.rowsInFlight[e.oldRowID]++
		}
		p.tablesInFlight[e.tableID]++
		if e.barrier {
			p.barriersInFlight[e.tableID]++
			p.barriersPending--
		}
		p.bytes -= e.bytes
	}
	return f.taken, f.wake
}

// forming is a batch take is forming, with what it learnt of the
// pending events it went past.
type forming struct {
	p   *pending
	now time.Time
	// blocked are the rows of events left pending: later events of those
	// rows must wait too.
	blocked map[rowID]bool
	// With a barrier pending or in flight (tableRules): the tables held
	// behind a barrier, and the tables with an earlier event still
	// pending or taken into this batch.
	tableRules             bool
	heldTables, seenTables map[rowID]bool
	taken                  []*entry
	size                   int
	wake                   time.Time // earliest notBefore of an event left backing off
}

func (p *pending) newForming(now time.Time) *forming {
	f := &forming{p: p, now: now, blocked: map[rowID]bool{}}
	f.tableRules = p.barriersPending > 0 || len(p.barriersInFlight) > 0
	if f.tableRules {
		f.heldTables, f.seenTables = map[rowID]bool{}, map[rowID]bool{}
	}
	return f
}

// add takes e into the batch and reports true, or leaves it pending (and
// its rows blocked) and reports false.
func (f *forming) add(e *entry) bool {
	if !f.mayGo(e) || !f.fits(e) {
		f.blocked[e.rowID] = true // later events of this row must wait too
		if e.oldRow != "" {
			f.blocked[e.oldRowID] = true
		}
		return false
	}
	f.taken = append(f.taken, e)
	f.size += e.bytes
	return true
}

// mayGo reports whether e may be delivered now, whatever batch it is in:
// its rows are neither blocked nor in flight, the table rules let it
// through, and it is not backing off.
func (f *forming) mayGo(e *entry) bool {
	p := f.p
	ok := !f.blocked[e.rowID] && p.rowsInFlight[e.rowID] == 0 &&
		(e.oldRow == "" || (!f.blocked[e.oldRowID] && p.rowsInFlight[e.oldRowID] == 0))
	if f.tableRules {
		ok = ok && !f.heldTables[e.tableID] && p.barriersInFlight[e.tableID] == 0 &&
			(!e.barrier || (!f.seenTables[e.tableID] && p.tablesInFlight[e.tableID] == 0))
		f.seenTables[e.tableID] = true
		if e.barrier {
			f.heldTables[e.tableID] = true // taken or not, later events wait for it
		}
	}
	if ok && e.notBefore.After(f.now) {
		if f.wake.IsZero() || e.notBefore.Before(f.wake) {
			f.wake = e.notBefore
		}
		return false
	}
	return ok
}

// fits reports whether e may join the events taken so far.
func (f *forming) fits(e *entry) bool {
	if len(f.taken) == 0 {
		return true
	}
	first := f.taken[0]
	switch {
	case first.replay != e.replay:
		// The sink is told a batch is a replay (attempt.Batch.Replay): a
		// batch is all replayed events or none.
		return false
	case first.isolation == batchOne || e.isolation == batchOne:
		return false
	case (first.isolation == batchRow || e.isolation == batchRow) && e.row != first.row:
		return false
	}
	return true
}

// landed releases the rows of a batch that came back.
func (p *pending) landed(batch []*entry) {
	for _, e := range batch {
		release(p.rowsInFlight, e.rowID)
		if e.oldRow != "" {
			release(p.rowsInFlight, e.oldRowID)
		}
		release(p.tablesInFlight, e.tableID)
		if e.barrier {
			release(p.barriersInFlight, e.tableID)
		}
	}
}

func release(m map[rowID]int, k rowID) {
	if m[k]--; m[k] <= 0 {
		delete(m, k)
	}
}

// touches reports whether e belongs to one of rows.
func (e *entry) touches(rows map[string]bool) bool {
	return rows[e.row] || (e.oldRow != "" && rows[e.oldRow])
}

// removeBehind takes out, in order, every pending entry that must go after
// one of es (events that failed and are being parked): an entry of one of
// their rows, a truncate of their table later than one of them, any later
// entry of the table of a truncate among them. An entry taken out brings
// in what must go after it in turn. The list is in id order, so one pass
// finds them all; an earlier entry of the same table is never taken (it
// must go before, not after).
func (p *pending) removeBehind(es []*entry) []*entry {
	rows := map[string]bool{}
	first := map[string]cdc.EventID{}      // table → its earliest event being parked
	firstTrunc := map[string]cdc.EventID{} // table → its earliest truncate being parked
	earliest := func(m map[string]cdc.EventID, e *entry) {
		if f, ok := m[e.table]; !ok || e.ev.ID.Compare(f) < 0 {
			m[e.table] = e.ev.ID
		}
	}
	note := func(e *entry) {
		rows[e.row] = true
		if e.oldRow != "" {
			rows[e.oldRow] = true
		}
		earliest(first, e)
		if e.barrier {
			earliest(firstTrunc, e)
		}
	}
	for _, e := range es {
		note(e)
	}
	after := func(m map[string]cdc.EventID, e *entry) bool {
		f, ok := m[e.table]
		return ok && f.Compare(e.ev.ID) < 0
	}
	return p.remove(func(e *entry) bool {
		if e.touches(rows) || (e.barrier && after(first, e)) || after(firstTrunc, e) {
			note(e)
			return true
		}
		return false
	})
}

func (p *pending) remove(match func(*entry) bool) []*entry {
	var out []*entry
	keep := p.list[:0]
	for _, e := range p.list {
		if match(e) {
			out = append(out, e)
			p.bytes -= e.bytes
			if e.barrier {
				p.barriersPending--
			}
		} else {
			keep = append(keep, e)
		}
	}
	clear(p.list[len(keep):])
	p.list = keep
	return out
}

// hasReplay reports whether replayed events of row are still pending (not
// in flight: callers check p.rowsInFlight for that).
func (p *pending) hasReplay(row string) bool {
	for _, e := range p.list {
		if e.replay && (e.row == row || e.oldRow == row) {
			return true
		}
	}
	return false
}
