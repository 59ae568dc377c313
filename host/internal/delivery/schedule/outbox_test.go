package schedule

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/outbox"
	"github.com/walcast/walcast/pluginkit"
)

// pushOutbox commits one transaction of public.outbox: the insert of
// outbox row id (aggregate agg), then its delete, as the recipe does.
func (h *harness) pushOutbox(id int, agg string, seq int) pluginkit.EventID {
	h.lsn += 0x100
	eid := pluginkit.EventID{CommitLSN: h.lsn}
	key := fmt.Sprintf(`{"id":%d}`, id)
	row := fmt.Sprintf(`{"id":%d,"aggregatetype":"order","aggregateid":%q,"type":"T","payload":{"seq":%d}}`, id, agg, seq)
	ins := pluginkit.Event{ID: eid, Schema: "public", Table: "outbox", Op: pluginkit.OpInsert, Key: []byte(key),
		Payload: fmt.Appendf(nil, `{"id":%q,"schema":"public","table":"outbox","op":"insert","key":%s,"new":%s,"old":null}`, eid.String(), key, row)}
	del := pluginkit.Event{ID: pluginkit.EventID{CommitLSN: h.lsn, Index: 1}, Schema: "public", Table: "outbox", Op: pluginkit.OpDelete, Key: []byte(key),
		Payload: fmt.Appendf(nil, `{"id":"x","schema":"public","table":"outbox","op":"delete","key":%s,"new":null,"old":%s}`, key, key)}
	for _, ev := range []pluginkit.Event{ins, del} {
		seq, err := h.tracker.Add(ev.ID)
		if err != nil {
			h.t.Fatal(err)
		}
		h.queue.C <- fanout.Item{Seq: seq, Event: ev}
	}
	h.tracker.Commit(h.lsn + 8)
	return eid
}

func outboxRouter(t *testing.T, spec outbox.Spec) *outbox.Router {
	t.Helper()
	r, err := outbox.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// One aggregate is one lane: outbox rows all have keys of their own, yet
// two events of an aggregate are never in flight at once (fakeSink checks
// the row of what it receives, the aggregate id) and arrive in commit
// order, over many lanes and random latencies; the deletes are resolved
// without delivery.
func TestOutboxAggregateIsOneLane(t *testing.T) {
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, latency: func() time.Duration { return time.Duration(rand.IntN(3)) * time.Millisecond }}
	h := start(t, Config{BatchSize: 1, MaxInFlight: 8, Outbox: outboxRouter(t, outbox.Defaults("public.outbox"))}, sink)
	const n = 300
	for i := range n {
		h.pushOutbox(i, fmt.Sprintf("o-%d", i%3), i)
	}
	h.waitResolved(time.Minute)
	got := sink.delivered()
	if len(got) != n || h.sched.Stats.Filtered.Load() != n {
		t.Fatalf("delivered %d, filtered %d; want %d each", len(got), h.sched.Stats.Filtered.Load(), n)
	}
	checkRowOrder(t, got)
	if got[0].Route != "outbox.event.order" || got[0].Headers["type"] != "T" {
		t.Fatalf("event %+v", got[0])
	}
}

// An outbox row the outbox cannot read (here: a pipeline file naming a
// payload column the table does not have) parks with an error naming the
// column, and the aggregate's later events park behind it; once the file
// is fixed a replay delivers them in order, in the aggregate's lane.
func TestOutboxErrorParksTheAggregate(t *testing.T) {
	wrong := outbox.Defaults("public.outbox")
	wrong.PayloadColumn = "body"
	store := &memParked{}
	sink := &fakeSink{t: t, inFlight: map[string]bool{}}
	h := start(t, Config{BatchSize: 10, Parked: store, Outbox: outboxRouter(t, wrong)}, sink)
	first := h.pushOutbox(1, "o-1", 1)
	second := h.pushOutbox(2, "o-1", 2)
	h.waitResolved(time.Minute)
	waitParked(t, store, 2)
	ps, _ := store.ListParked(context.Background(), "s", "")
	lane := "public.outbox\x1f\"o-1\""
	if ps[0].Event.ID != first || !strings.Contains(ps[0].LastError, `"body"`) || ps[0].Row != lane ||
		ps[1].Event.ID != second || ps[1].Row != lane {
		t.Fatalf("parked %+v", ps)
	}
	close(h.stop)

	sink2 := &fakeSink{t: t, inFlight: map[string]bool{}}
	h2 := start(t, Config{BatchSize: 10, Parked: store, Outbox: outboxRouter(t, outbox.Defaults("public.outbox"))}, sink2)
	if err := h2.sched.Replay(context.Background(), parking.ReplayRequest{Sink: "s"}); err != nil {
		t.Fatal(err)
	}
	waitParked(t, store, 0)
	got := sink2.delivered()
	if len(got) != 2 || got[0].ID != first || got[1].ID != second || string(got[1].Payload) != `{"seq":2}` || string(got[1].Key) != `"o-1"` {
		t.Fatalf("replayed %+v", got)
	}
}
