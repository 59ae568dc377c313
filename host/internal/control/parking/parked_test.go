package parking

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/control/reports"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/pluginkit/cdc"
)

func TestParkListUnpark(t *testing.T) {
	ctx := context.Background()
	s, pool := initStore(t, "shop")
	now := time.Now()
	ev := func(id string) cdc.Event {
		return cdc.Event{ID: cdc.MustParseEventID(id), Schema: "public", Table: "t", Op: cdc.OpUpdate,
			Key: []byte(`{"id":1}`), Payload: []byte(`{"x":1}`)}
	}
	ps := []Event{
		{Sink: "hook", Event: ev("0/1A:0"), Row: "r1", Attempts: 5, LastError: "boom", FirstFailure: now, LastFailure: now},
		{Sink: "hook", Event: ev("0/A:3"), Row: "r1", LastError: "behind", FirstFailure: now, LastFailure: now},
	}
	if err := s.Park(ctx, ps); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListParked(ctx, "hook", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Event.ID != cdc.MustParseEventID("0/A:3") || string(got[1].Event.Payload) != `{"x":1}` {
		t.Fatalf("listed %+v", got)
	}
	if rows, _ := s.ParkedRows(ctx, "hook"); len(rows) != 1 || rows[0] != "r1" {
		t.Fatalf("rows %v", rows)
	}
	if n, _ := s.CountParked(ctx); n != 2 {
		t.Fatalf("count %d", n)
	}
	if err := s.Unpark(ctx, "hook", []cdc.EventID{got[0].Event.ID}); err != nil {
		t.Fatal(err)
	}
	if row, _ := s.ParkedRowOf(ctx, "hook", cdc.MustParseEventID("0/1A:0")); row != "r1" {
		t.Fatalf("row of parked event: %q", row)
	}
	if err := s.RequestReplay(ctx, ReplayRequest{Sink: "hook"}); err != nil {
		t.Fatal(err)
	}
	reqs, err := s.ReplayRequests(ctx)
	if err != nil || len(reqs) != 1 || reqs[0].Sink != "hook" || reqs[0].Seq == 0 {
		t.Fatalf("requests %v %v", reqs, err)
	}
	// Read again until it is done: a request is consumed only once handled.
	if again, err := s.ReplayRequests(ctx); err != nil || len(again) != 1 || again[0].Seq != reqs[0].Seq {
		t.Fatalf("requests read again %v %v", again, err)
	}
	if err := s.DoneReplayRequest(ctx, reqs[0].Seq); err != nil {
		t.Fatal(err)
	}
	if left, err := s.ReplayRequests(ctx); err != nil || len(left) != 0 {
		t.Fatalf("requests after done %v %v", left, err)
	}
	usage := reports.New(pool, "shop")
	if err := usage.AddUsage(ctx, []reports.Usage{{Sink: "hook", Hour: now.Truncate(time.Hour), Attempts: 2, Delivered: 10, Bytes: 100}}); err != nil {
		t.Fatal(err)
	}
	if err := usage.AddUsage(ctx, []reports.Usage{{Sink: "hook", Hour: now.Truncate(time.Hour), Attempts: 1, Failed: 1}}); err != nil {
		t.Fatal(err)
	}
	us, err := usage.LoadUsage(ctx)
	if err != nil || len(us) != 1 || us[0].Attempts != 3 || us[0].Delivered != 10 || us[0].Failed != 1 {
		t.Fatalf("usage %+v %v", us, err)
	}
}

// An update that changed the key is parked under both rows: both count as
// parked, and listing either row finds it. Migrate also upgrades a table made
// before old_row_key existed.
func TestParkedKeyChangeBelongsToBothRows(t *testing.T) {
	ctx := context.Background()
	s, pool := initStore(t, "shop")
	// A table made by an older walcast (schema version 3), then Migrate again.
	if _, err := pool.Exec(ctx, `ALTER TABLE walcast.parked DROP COLUMN old_row_key; DELETE FROM walcast.schema_version WHERE version >= 4`); err != nil {
		t.Fatal(err)
	}
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ev := cdc.Event{ID: cdc.MustParseEventID("0/1B:0"), Schema: "public", Table: "t", Op: cdc.OpUpdate, Key: []byte(`{"id":2}`), Payload: []byte(`{}`)}
	if err := s.Park(ctx, []Event{{Sink: "hook", Event: ev, Row: "new", OldRow: "old", LastError: "x", FirstFailure: now, LastFailure: now}}); err != nil {
		t.Fatal(err)
	}
	rows, err := s.ParkedRows(ctx, "hook")
	if err != nil || len(rows) != 2 {
		t.Fatalf("parked rows %v (%v), want old and new", rows, err)
	}
	for _, r := range []string{"old", "new"} {
		got, err := s.ListParked(ctx, "hook", r)
		if err != nil || len(got) != 1 || got[0].Row != "new" || got[0].OldRow != "old" {
			t.Fatalf("row %s: listed %+v (%v)", r, got, err)
		}
	}
}

// TestRecentParkedAndSummary: the console's view of walcast.parked, a
// count and the latest error per sink, and the newest failures first.
func TestRecentParkedAndSummary(t *testing.T) {
	ctx := context.Background()
	s, pool := initStore(t, "shop")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	park := func(sink, id, msg string, at time.Duration) Event {
		return Event{Sink: sink, Row: "r", Attempts: 1, LastError: msg, FirstFailure: t0, LastFailure: t0.Add(at),
			Event: cdc.Event{ID: cdc.MustParseEventID(id), Schema: "public", Table: "t", Op: cdc.OpInsert, Key: []byte(`{}`), Payload: []byte(`{}`)}}
	}
	if err := s.Park(ctx, []Event{
		park("hook", "0/A:0", "first", 0), park("hook", "0/B:0", "latest", 3*time.Minute), park("hook", "0/C:0", "middle", time.Minute),
		park("kafka", "0/A:1", "only", 2*time.Minute),
	}); err != nil {
		t.Fatal(err)
	}
	if err := New(pool, "other").Park(ctx, []Event{park("hook", "0/D:0", "other pipeline", 10*time.Minute)}); err != nil {
		t.Fatal(err)
	}
	sum, err := s.SummarizeParked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum) != 2 || sum["hook"].Count != 3 || sum["hook"].LastError != "latest" || !sum["hook"].LastFailure.Equal(t0.Add(3*time.Minute)) ||
		sum["kafka"].Count != 1 || sum["kafka"].LastError != "only" {
		t.Errorf("SummarizeParked = %+v", sum)
	}
	recent, err := s.RecentParked(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range recent {
		got = append(got, p.Sink+" "+p.Event.ID.String())
	}
	if want := "hook 0/B:0|kafka 0/A:1|hook 0/C:0"; strings.Join(got, "|") != want {
		t.Errorf("RecentParked(3) = %s, want %s", strings.Join(got, "|"), want)
	}
}

// ListParkedTable returns one table's parked events of one sink, in id
// order (not string order), and nothing of other tables, sinks or
// pipelines.
func TestListParkedTable(t *testing.T) {
	ctx := context.Background()
	s, pool := initStore(t, "shop")
	now := time.Now()
	park := func(sink, table, id string) Event {
		return Event{Sink: sink, Row: table + "/r", LastError: "x", FirstFailure: now, LastFailure: now,
			Event: cdc.Event{ID: cdc.MustParseEventID(id), Schema: "public", Table: table, Op: cdc.OpInsert, Key: []byte(`{}`), Payload: []byte(`{}`)}}
	}
	if err := s.Park(ctx, []Event{park("hook", "t", "0/1A:0"), park("hook", "t", "0/A:1"), park("hook", "u", "0/B:0"),
		park("kafka", "t", "0/C:0")}); err != nil {
		t.Fatal(err)
	}
	if err := New(pool, "other").Park(ctx, []Event{park("hook", "t", "0/D:0")}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListParkedTable(ctx, "hook", "public", "t")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range got {
		ids = append(ids, p.Event.ID.String())
	}
	if want := "0/A:1 0/1A:0"; strings.Join(ids, " ") != want {
		t.Fatalf("ListParkedTable(hook, public.t) = %v, want %s", ids, want)
	}
}
