package schedule

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/rules"
	"github.com/walcast/walcast/pluginkit"
)

// pushRow commits one transaction with one envelope of row id whose new
// row has d and an e-mail address.
func (h *harness) pushRow(id, d int) pluginkit.EventID {
	h.lsn += 0x100
	eid := pluginkit.EventID{CommitLSN: h.lsn}
	key := fmt.Sprintf(`{"id":%d}`, id)
	payload := fmt.Sprintf(`{"id":%q,"commit_lsn":"0/0","xid":1,"commit_time":"2026-11-30T10:00:00Z","schema":"public","table":"t","op":"update","key":%s,"new":{"id":%d,"d":%d,"email":"user%d@example.com"},"old":null}`,
		eid.String(), key, id, d, id)
	ev := pluginkit.Event{ID: eid, Schema: "public", Table: "t", Op: pluginkit.OpUpdate, Key: []byte(key), Payload: []byte(payload)}
	seq, err := h.tracker.Add(ev.ID)
	if err != nil {
		h.t.Fatal(err)
	}
	h.queue.C <- fanout.Item{Seq: seq, Event: ev}
	h.tracker.Commit(h.lsn + 8)
	return eid
}

func compileRules(t *testing.T, s rules.Spec) *rules.Rules {
	t.Helper()
	r, probs := rules.Compile(s)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	return r
}

// A sink's rules: filtered events are resolved without delivery, the
// others arrive transformed (no masked value in the bytes), an event on
// which the filter fails is parked with the expression's error and the
// later events of its row park behind it; after the rules are fixed (a new
// scheduler, as after a restart with the fixed file) a replay delivers
// them, transformed, in row order.
func TestRulesFilterTransformParkAndReplay(t *testing.T) {
	spec := rules.Spec{
		Filter:    `100 / new.d > 10`, // d = 0 fails: division by zero
		Route:     `"t-" + string(new.id % 2)`,
		Transform: rules.Transform{Mask: map[string]string{"email": rules.MaskSHA256}},
	}
	sink := &fakeSink{t: t, inFlight: map[string]bool{}}
	store := &memParked{}
	h := start(t, Config{BatchSize: 10, RetryBase: time.Millisecond, MaxAttempts: 2, Parked: store, Rules: compileRules(t, spec)}, sink)
	want := []pluginkit.EventID{h.pushRow(1, 1)} // 100 > 10: kept
	h.pushRow(2, 50)                             // 2 > 10 is false: filtered
	bad := h.pushRow(3, 0)                       // fails
	behind := h.pushRow(3, 1)                    // parked behind it
	want = append(want, h.pushRow(4, 2))
	h.waitResolved(time.Minute)
	waitParked(t, store, 2)

	got := sink.delivered()
	if len(got) != len(want) || got[0].ID != want[0] || got[1].ID != want[1] {
		t.Fatalf("delivered %v, want %v", idsOf(got), want)
	}
	for _, e := range got {
		if bytes.Contains(e.Payload, []byte("@example.com")) {
			t.Fatalf("a masked value reached the sink: %s", e.Payload)
		}
	}
	if got[0].Route != "t-1" || got[1].Route != "t-0" {
		t.Fatalf("routes %q %q", got[0].Route, got[1].Route)
	}
	ps, _ := store.ListParked(context.Background(), "s", "")
	if len(ps) != 2 || ps[0].Event.ID != bad || !strings.Contains(ps[0].LastError, "division by zero") || ps[1].Event.ID != behind {
		t.Fatalf("parked %+v", ps)
	}
	if !bytes.Contains(ps[0].Event.Payload, []byte("user3@example.com")) {
		t.Fatalf("parked payload %s: walcast.parked keeps the event as captured, to apply the rules again at replay", ps[0].Event.Payload)
	}

	// The file is fixed: a new scheduler (a restarted daemon) replays.
	close(h.stop)
	fixed := spec
	fixed.Filter = `new.d == 0 || 100 / new.d > 10`
	sink2 := &fakeSink{t: t, inFlight: map[string]bool{}}
	h2 := start(t, Config{BatchSize: 10, RetryBase: time.Millisecond, MaxAttempts: 2, Parked: store, Rules: compileRules(t, fixed)}, sink2)
	if err := h2.sched.Replay(context.Background(), parking.ReplayRequest{Sink: "s"}); err != nil {
		t.Fatal(err)
	}
	waitParked(t, store, 0)
	got = sink2.delivered()
	if len(got) != 2 || got[0].ID != bad || got[1].ID != behind || got[0].Route != "t-1" {
		t.Fatalf("replayed %v", idsOf(got))
	}
	for _, e := range got {
		if bytes.Contains(e.Payload, []byte("@example.com")) {
			t.Fatalf("a masked value reached the sink on replay: %s", e.Payload)
		}
	}
}

// A replay under rules that still fail keeps the event parked with the
// new error; under rules that now filter it out, it leaves walcast.parked
// without reaching the sink.
func TestRulesAtReplay(t *testing.T) {
	store := &memParked{}
	sink := &fakeSink{t: t, inFlight: map[string]bool{}}
	h := start(t, Config{BatchSize: 10, Parked: store, Rules: compileRules(t, rules.Spec{Filter: `new.missing == 1`})}, sink)
	h.pushRow(1, 1)
	h.waitResolved(time.Minute)
	waitParked(t, store, 1)
	close(h.stop)

	h2 := start(t, Config{BatchSize: 10, Parked: store, Rules: compileRules(t, rules.Spec{Filter: `new.other == 1`})}, sink)
	if err := <-h2.sched.ReplayWait(context.Background(), parking.ReplayRequest{Sink: "s"}); err != nil {
		t.Fatal(err)
	}
	ps, _ := store.ListParked(context.Background(), "s", "")
	if len(ps) != 1 || !strings.Contains(ps[0].LastError, "other") {
		t.Fatalf("parked %+v, want the event with the new expression's error", ps)
	}
	close(h2.stop)

	h3 := start(t, Config{BatchSize: 10, Parked: store, Rules: compileRules(t, rules.Spec{Filter: `has(new.other)`})}, sink)
	if err := h3.sched.Replay(context.Background(), parking.ReplayRequest{Sink: "s"}); err != nil {
		t.Fatal(err)
	}
	waitParked(t, store, 0)
	if got := sink.delivered(); len(got) != 0 {
		t.Fatalf("delivered %v", idsOf(got))
	}
}

func idsOf(evs []pluginkit.Event) []pluginkit.EventID {
	out := make([]pluginkit.EventID, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}
