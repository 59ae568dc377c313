package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/walcast/walcast/pluginkit"
)

// ev builds an envelope as the host encodes it.
func ev(t testing.TB, lsn uint64, idx uint64, table, op string, commit time.Time, key, row string) pluginkit.Event {
	t.Helper()
	id := pluginkit.EventID{CommitLSN: lsn, Index: idx}
	old := "null"
	if op == "delete" {
		old, row = key, "null"
	}
	payload := fmt.Sprintf(`{"id":%q,"commit_lsn":%q,"xid":%d,"commit_time":%q,"schema":"public","table":%q,"op":%q,"key":%s,"new":%s,"old":%s}`,
		id, pluginkit.FormatLSN(lsn), 700+lsn%100, commit.Format("2006-01-02T15:04:05.000000Z"), table, op, key, row, old)
	if !json.Valid([]byte(payload)) {
		t.Fatalf("invalid test envelope %s", payload)
	}
	return pluginkit.Event{ID: id, Schema: "public", Table: table, Op: pluginkit.Op(op), Key: []byte(key), Payload: []byte(payload)}
}

// openSink configures and opens a sink on the fake with extra config.
func openSink(t *testing.T, f *fakeS3, extra map[string]any) (*Sink, pluginkit.OpenResult) {
	t.Helper()
	s := newSink(discardLogger())
	ctx := context.Background()
	if err := s.Configure(ctx, pluginkit.Setup{Config: testConfig(t, f, extra), Sink: pluginkit.Identity{Pipeline: "shop", SinkID: "lake"}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, res
}

func deliver(t *testing.T, s *Sink, b pluginkit.Batch) pluginkit.DeliverResult {
	t.Helper()
	res, err := s.Deliver(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

var day1 = time.Date(2026, 11, 30, 23, 59, 59, 999999000, time.UTC)

// TestLayout: one object per table and commit date, keys from the events'
// ids (path-safe, sortable), and the checkpoint object after them.
func TestLayout(t *testing.T) {
	f := startFakeS3(t)
	s, res := openSink(t, f, nil)
	if !res.Checkpoint.IsZero() {
		t.Fatalf("fresh bucket: checkpoint %s", res.Checkpoint)
	}
	day2 := day1.Add(time.Microsecond)
	batch := []pluginkit.Event{
		ev(t, 0xA0, 0, "orders", "insert", day1, `{"id":1}`, `{"id":1,"v":1}`),
		ev(t, 0xA0, 1, "custom/ers", "insert", day1, `{"id":1}`, `{"id":1,"v":1}`),
		ev(t, 0x1A0, 0, "orders", "update", day2, `{"id":1}`, `{"id":1,"v":2}`),
		ev(t, 0x1A0, 1, "orders", "delete", day2, `{"id":1}`, ""),
	}
	deliver(t, s, pluginkit.Batch{Events: batch})
	want := []string{
		"cdc/_walcast/shop.lake.checkpoint.json",
		"cdc/public.custom%2Fers/date=2026-11-30/00000000000000A0-0000000001_00000000000000A0-0000000001.jsonl",
		"cdc/public.orders/date=2026-11-30/00000000000000A0-0000000000_00000000000000A0-0000000000.jsonl",
		"cdc/public.orders/date=2026-12-01/00000000000001A0-0000000000_00000000000001A0-0000000001.jsonl",
	}
	if got := f.keys("cdc/"); !slices.Equal(got, want) {
		t.Fatalf("keys:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := f.object(want[3]); !bytes.Equal(got, append(append(append(batch[2].Payload, '\n'), batch[3].Payload...), '\n')) {
		t.Fatalf("object holds %s", got)
	}
	var cp checkpointDoc
	json.Unmarshal(f.object(want[0]), &cp)
	if cp.Checkpoint != "0/1A0:1" || cp.Pipeline != "shop" || cp.Sink != "lake" {
		t.Fatalf("checkpoint %+v", cp)
	}
	for _, k := range want[1:] {
		id, err := parseKeyID(strings.Split(k[strings.LastIndexByte(k, '/')+1:], "_")[0])
		if err != nil || id.CommitLSN == 0 {
			t.Fatalf("key %s: first id %v, %v", k, id, err)
		}
	}
}

// TestRedeliveryOverwrites: the same batch written again (a retry, or a
// redelivery after a crash before the checkpoint) lands on the same keys;
// after a restart the checkpoint is read back and what lies at or below
// it is skipped, but a replay batch is written.
func TestRedeliveryOverwrites(t *testing.T) {
	f := startFakeS3(t)
	s, _ := openSink(t, f, nil)
	batch := []pluginkit.Event{
		ev(t, 0xB0, 0, "orders", "insert", day1, `{"id":1}`, `{"id":1,"v":1}`),
		ev(t, 0xB0, 1, "items", "insert", day1, `{"id":2}`, `{"id":2,"v":1}`),
	}
	s.beforeCheckpoint = func(context.Context) error { return errors.New("crash") }
	if _, err := s.Deliver(context.Background(), pluginkit.Batch{Events: batch}); err == nil {
		t.Fatal("the hook did not fail the batch")
	}
	s.beforeCheckpoint = nil
	before := f.keys("cdc/")
	deliver(t, s, pluginkit.Batch{Events: batch})
	after := f.keys("cdc/")
	if len(before) != 2 || len(after) != 3 { // + the checkpoint
		t.Fatalf("keys before the retry %v, after %v", before, after)
	}

	// A restarted sink reads the checkpoint back.
	s2, res := openSink(t, f, nil)
	if res.Checkpoint.String() != "0/B0:1" {
		t.Fatalf("checkpoint after restart %s, want 0/B0:1", res.Checkpoint)
	}
	puts := f.count(http.MethodPut)
	if r := deliver(t, s2, pluginkit.Batch{Events: batch}); r.Duplicates != 2 || f.count(http.MethodPut) != puts {
		t.Fatalf("redelivery below the checkpoint: %d duplicates, %d PUTs", r.Duplicates, f.count(http.MethodPut)-puts)
	}
	if r := deliver(t, s2, pluginkit.Batch{Events: batch[:1], Replay: true}); r.Duplicates != 0 || f.count(http.MethodPut) != puts+1 {
		t.Fatalf("replay: %d duplicates, %d PUTs, want the object written and the checkpoint left alone", r.Duplicates, f.count(http.MethodPut)-puts)
	}
	if _, res := openSink(t, f, nil); res.Checkpoint.String() != "0/B0:1" {
		t.Fatalf("a replay moved the checkpoint to %s", res.Checkpoint)
	}
}

// TestMaxObjectBytesAndMultipart: max_object_bytes splits a table's events
// into several objects, deterministically; an object above
// multipart_threshold goes up in parts and reads back whole.
func TestMaxObjectBytesAndMultipart(t *testing.T) {
	f := startFakeS3(t)
	s, _ := openSink(t, f, map[string]any{"max_object_bytes": 4 << 20, "multipart_threshold": 5 << 20, "part_size": 5 << 20})
	pad := strings.Repeat("x", 1<<20)
	var batch []pluginkit.Event
	for i := range 12 {
		batch = append(batch, ev(t, 0xC0, uint64(i), "blobs", "insert", day1, fmt.Sprintf(`{"id":%d}`, i), fmt.Sprintf(`{"id":%d,"pad":%q}`, i, pad)))
	}
	big := ev(t, 0xC0, 12, "blobs", "insert", day1, `{"id":12}`, fmt.Sprintf(`{"id":12,"pad":%q}`, strings.Repeat("y", 11<<20)))
	deliver(t, s, pluginkit.Batch{Events: append(batch, big)})
	keys := f.keys("cdc/public.blobs/")
	// 12 events of ~1 MiB: 3 per 4 MiB object; the 11 MiB event alone.
	if len(keys) != 5 {
		t.Fatalf("%d objects, want 5: %v", len(keys), keys)
	}
	if f.parts < 3 {
		t.Fatalf("%d parts uploaded, want the 11 MiB object in 3", f.parts)
	}
	last := f.object(keys[4])
	if !bytes.Equal(last, append(big.Payload, '\n')) {
		t.Fatalf("the multipart object reads back as %d bytes, want %d", len(last), len(big.Payload)+1)
	}
}

// TestParquetSchema reads a Parquet object back with parquet-go: the
// envelope's fields and the row columns, typed from their values.
func TestParquetSchema(t *testing.T) {
	f := startFakeS3(t)
	s, _ := openSink(t, f, map[string]any{"format": "parquet"})
	batch := []pluginkit.Event{
		ev(t, 0xD0, 0, "t", "insert", day1, `{"id":1}`, `{"id":1,"f":1.5,"n":"19.90","b":true,"j":{"a":[1]},"x":null,"w\"q":2}`),
		ev(t, 0xD0, 1, "t", "update", day1, `{"id":1}`, `{"id":1,"f":2,"n":"NaN","b":false,"j":[],"x":null,"w\"q":3}`),
		ev(t, 0xD0, 2, "t", "delete", day1, `{"id":1}`, ""),
	}
	deliver(t, s, pluginkit.Batch{Events: batch})
	keys := f.keys("cdc/public.t/")
	if len(keys) != 1 || !strings.HasSuffix(keys[0], ".parquet") {
		t.Fatalf("keys %v", keys)
	}
	body := f.object(keys[0])
	pf, err := parquet.OpenFile(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	schema := pf.Schema().String()
	for _, want := range []string{
		"required binary id (STRING)", "required int64 xid (INT(64,true))", "required int64 commit_time (TIMESTAMP(isAdjustedToUTC=true,unit=MICROS))",
		"optional double f", "optional binary n (STRING)", "optional boolean b", "optional binary j (JSON)", "optional binary x (STRING)",
		"optional int64 id (INT(64,true))", `optional int64 w"q`,
	} {
		if !strings.Contains(schema, want) {
			t.Errorf("schema lacks %q:\n%s", want, schema)
		}
	}
	rows := parquet.NewReader(pf)
	got := make([]parquet.Row, 4)
	n, err := rows.ReadRows(got)
	if n != 3 || pf.NumRows() != 3 {
		t.Fatalf("read %d rows of %d: %v", n, pf.NumRows(), err)
	}
}

// TestMissingBucketAtOpen: a bucket that does not exist stops the sink at
// Open, fatally, naming the bucket and what to do.
func TestMissingBucketAtOpen(t *testing.T) {
	f := startFakeS3(t)
	s := newSink(discardLogger())
	ctx := context.Background()
	if err := s.Configure(ctx, pluginkit.Setup{Config: testConfig(t, f, map[string]any{"bucket": "nope"})}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Open(ctx)
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindFatal || !strings.Contains(fmt.Sprint(err), `bucket "nope" does not exist`) {
		t.Fatalf("Open on a missing bucket: %v (%v), want a fatal error naming it", err, kind)
	}
}

// TestRecutBatchDuplicates is the one way an event ends up in two objects
// (docs/sinks.md): a batch interrupted after its objects were written and
// before its checkpoint, delivered again cut differently (walcast batches
// whatever is queued when it retries). Both objects stay, whole, and hold
// byte-identical copies.
func TestRecutBatchDuplicates(t *testing.T) {
	f := startFakeS3(t)
	s, _ := openSink(t, f, nil)
	var evs []pluginkit.Event
	for i := range 4 {
		evs = append(evs, ev(t, 0xE0, uint64(i), "orders", "insert", day1, fmt.Sprintf(`{"id":%d}`, i), fmt.Sprintf(`{"id":%d,"v":0}`, i)))
	}
	s.beforeCheckpoint = func(context.Context) error { return errors.New("killed") }
	s.Deliver(context.Background(), pluginkit.Batch{Events: evs[:3]})
	s.beforeCheckpoint = nil
	deliver(t, s, pluginkit.Batch{Events: evs})
	keys := f.keys("cdc/public.orders/")
	if len(keys) != 2 {
		t.Fatalf("objects %v, want the interrupted batch's and the re-cut one's", keys)
	}
	a, b := f.object(keys[0]), f.object(keys[1])
	if !bytes.HasPrefix(b, a) && !bytes.HasPrefix(a, b) {
		t.Fatalf("the copies differ:\n%s\n%s", a, b)
	}
}

// TestNewEpochIsWrittenBelowCheckpoint: after a failover the new
// primary's ids can be lower than the checkpoint (pluginkit.Batch.Epoch).
// A checkpoint object without an epoch (as an older sink or host wrote
// it) filters as before and adopts the first epoch it meets; a batch of a
// new epoch is written whole, then the checkpoint object moves down to its
// last id with its epoch: a reopened sink reports both and skips that
// batch's redelivery, also from a host without epochs. A replay of parked
// events of the old epoch, above the new checkpoint, moves neither, so the
// new epoch's next batch is not taken for a duplicate.
func TestNewEpochIsWrittenBelowCheckpoint(t *testing.T) {
	f := startFakeS3(t)
	batch := func(lsn uint64, n int) []pluginkit.Event {
		out := make([]pluginkit.Event, n)
		for i := range out {
			out[i] = ev(t, lsn, uint64(i), "orders", "insert", day1, fmt.Sprintf(`{"id":%d}`, i), fmt.Sprintf(`{"id":%d,"v":%d}`, i, lsn))
		}
		return out
	}
	deliverIn := func(s *Sink, epoch string, replay bool, evs []pluginkit.Event) (dups, puts int) {
		t.Helper()
		before := f.count(http.MethodPut)
		d := deliver(t, s, pluginkit.Batch{Events: evs, Epoch: epoch, Replay: replay}).Duplicates
		return d, f.count(http.MethodPut) - before
	}
	reopen := func(s *Sink, wantID, wantEpoch string) *Sink {
		t.Helper()
		s.Close(context.Background())
		s, res := openSink(t, f, nil)
		if res.Checkpoint.String() != wantID || res.Epoch != wantEpoch {
			t.Fatalf("Open reported %s of epoch %q, want %s of epoch %q", res.Checkpoint, res.Epoch, wantID, wantEpoch)
		}
		return s
	}

	s, _ := openSink(t, f, nil)
	deliverIn(s, "", false, batch(0x300, 5)) // a checkpoint of no epoch, as an older host wrote it
	if cp := f.object("cdc/_walcast/shop.lake.checkpoint.json"); bytes.Contains(cp, []byte(`"epoch"`)) {
		t.Fatalf("a checkpoint written without an epoch holds one: %s", cp)
	}
	s = reopen(s, "0/300:4", "")
	if d, p := deliverIn(s, "A", false, batch(0x200, 5)); d != 5 || p != 0 {
		t.Fatalf("epoch A below a checkpoint of no epoch: %d duplicates, %d PUTs; want 5 and none (it is adopted, not distrusted)", d, p)
	}
	deliverIn(s, "A", false, batch(0x400, 5))
	s = reopen(s, "0/400:4", "A")

	// The failover: epoch B's ids are lower than A's checkpoint.
	if d, p := deliverIn(s, "B", false, batch(0x100, 5)); d != 0 || p != 2 {
		t.Fatalf("the first batch of epoch B, below A's checkpoint: %d duplicates, %d PUTs; want none, and its object and the checkpoint written", d, p)
	}
	s = reopen(s, "0/100:4", "B")
	if d, p := deliverIn(s, "B", false, batch(0x100, 5)); d != 5 || p != 0 {
		t.Fatalf("epoch B's first batch again: %d duplicates, %d PUTs; want 5 and none", d, p)
	}
	if d, _ := deliverIn(s, "", false, batch(0x100, 5)); d != 5 {
		t.Fatalf("the same batch from a host without epochs: %d duplicates, want 5", d)
	}
	if d, p := deliverIn(s, "B", true, batch(0x380, 2)); d != 0 || p != 1 { // parked in epoch A
		t.Fatalf("replay: %d duplicates, %d PUTs; want none, and its object only", d, p)
	}
	if d, _ := deliverIn(s, "B", false, batch(0x180, 5)); d != 0 {
		t.Fatalf("epoch B's next batch after a replay of higher ids: %d duplicates, want none (a replay must not move the checkpoint)", d)
	}
	reopen(s, "0/180:4", "B")
	var doc checkpointDoc
	if err := json.Unmarshal(f.object("cdc/_walcast/shop.lake.checkpoint.json"), &doc); err != nil || doc.Checkpoint != "0/180:4" || doc.Epoch != "B" {
		t.Fatalf("checkpoint object %+v (%v), want 0/180:4 of epoch B", doc, err)
	}
	if keys := f.keys("cdc/public.orders/"); len(keys) != 5 {
		t.Fatalf("objects %v, want one for each batch written (0x300, 0x400, 0x100, the replayed 0x380, 0x180)", keys)
	}
}

// TestParquetDetach: a partition's detach event (on_detach = "event")
// keeps the partition's name and its number of rows in Parquet, in the
// partition and rows columns; the other events have them null.
func TestParquetDetach(t *testing.T) {
	f := startFakeS3(t)
	s, _ := openSink(t, f, map[string]any{"format": "parquet"})
	detach := ev(t, 0xD1, 1, "t", "detach", day1, "null", "null")
	detach.Payload = append(bytes.TrimSuffix(detach.Payload, []byte("}")), `,"partition":"public.t_p1","rows":5000}`...)
	deliver(t, s, pluginkit.Batch{Events: []pluginkit.Event{ev(t, 0xD1, 0, "t", "insert", day1, `{"id":1}`, `{"id":1}`), detach}})
	keys := f.keys("cdc/public.t/")
	if len(keys) != 1 {
		t.Fatalf("keys %v", keys)
	}
	body := f.object(keys[0])
	pf, err := parquet.OpenFile(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	part, ok1 := pf.Schema().Lookup("partition")
	count, ok2 := pf.Schema().Lookup("rows")
	if !ok1 || !ok2 {
		t.Fatalf("schema lacks partition or rows:\n%s", pf.Schema())
	}
	got := make([]parquet.Row, 3)
	if n, _ := parquet.NewReader(pf).ReadRows(got); n != 2 {
		t.Fatalf("read %d rows, want 2", n)
	}
	value := func(r parquet.Row, col int) parquet.Value {
		for _, v := range r {
			if v.Column() == col {
				return v
			}
		}
		return parquet.Value{}
	}
	if v := value(got[0], part.ColumnIndex); !v.IsNull() {
		t.Errorf("insert's partition = %v, want null", v)
	}
	if v := value(got[1], part.ColumnIndex); v.String() != "public.t_p1" {
		t.Errorf("detach's partition = %v, want public.t_p1", v)
	}
	if v := value(got[1], count.ColumnIndex); v.IsNull() || v.Int64() != 5000 {
		t.Errorf("detach's rows = %v, want 5000", v)
	}
}
