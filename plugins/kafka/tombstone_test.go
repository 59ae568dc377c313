package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/pluginkit"
)

// needKcat returns kcat's path. In CI (CI=true) a missing kcat fails the
// test: `make tools` installs it. By hand the test is skipped with what to
// run.
func needKcat(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kcat not found in CI: the Makefile's tools target installs it (apt-get install -y kcat)")
		}
		t.Skip("kcat not found: run `make tools` (apt-get install -y kcat) to check what librdkafka sees")
	}
	return path
}

// kcatRecord is a record as kcat -J -Z prints it: with -Z a null key or
// value is JSON null, an empty one "".
type kcatRecord struct {
	Key     *string  `json:"key"`
	Payload *string  `json:"payload"`
	Headers []string `json:"headers"` // name, value, name, value...
	Offset  int64    `json:"offset"`
}

func (r kcatRecord) header(name string) string {
	for i := 0; i+1 < len(r.Headers); i += 2 {
		if r.Headers[i] == name {
			return r.Headers[i+1]
		}
	}
	return ""
}

func (r kcatRecord) String() string {
	key, val := "<null>", "<null>"
	if r.Key != nil {
		key = *r.Key
	}
	if r.Payload != nil {
		val = *r.Payload
		if len(val) > 40 {
			val = val[:40] + "..."
		}
	}
	d := r.header(derivedHeader)
	return fmt.Sprintf("%s op=%s derived=%q key=%s value=%s", r.header("walcast-id"), r.header("walcast-op"), d, key, val)
}

// readKcat reads a one-partition topic as a read_committed librdkafka
// consumer with -Z, so that a tombstone's value prints as null.
func readKcat(t *testing.T, addr, topic string) []kcatRecord {
	t.Helper()
	kcat := needKcat(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-C", "-b", addr, "-t", topic, "-o", "beginning", "-e", "-J", "-Z", "-q",
		"-X", "isolation.level=read_committed")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, stderr.Bytes())
	}
	var recs []kcatRecord
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		var r kcatRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("kcat line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// createCompacted creates topic with cleanup.policy=compact and one
// partition, the kind of topic a KTable or an upsert consumer reads.
func createCompacted(t *testing.T, addr, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopics(t.Context(), 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("create compacted topic %s: %v", topic, err)
	}
}

// rowEvents are a row's life in public.items and public.log (no key): an
// insert, an update that changes the key from 1 to 2 (default replica
// identity: "old" has the old key), a plain update, a delete, a row of a
// keyless table and a truncate.
func rowEvents() []pluginkit.Event {
	id := func(i uint64) pluginkit.EventID { return pluginkit.EventID{CommitLSN: 0x500, Index: i} }
	ev := func(i uint64, table string, op pluginkit.Op, key, rest string) pluginkit.Event {
		return pluginkit.Event{ID: id(i), Schema: "public", Table: table, Op: op, Key: []byte(key),
			Payload: fmt.Appendf(nil, `{"id":%q,"schema":"public","table":%q,"op":%q,"key":%s,%s}`, id(i), table, op, key, rest)}
	}
	return []pluginkit.Event{
		ev(0, "items", pluginkit.OpInsert, `{"id":1}`, `"new":{"id":1,"name":"a"},"old":null,"unchanged":[]`),
		ev(1, "items", pluginkit.OpUpdate, `{"id":2}`, `"new":{"id":2,"name":"a"},"old":{"id":1},"unchanged":[]`),
		ev(2, "items", pluginkit.OpUpdate, `{"id":2}`, `"new":{"id":2,"name":"b"},"old":null,"unchanged":[]`),
		ev(3, "items", pluginkit.OpDelete, `{"id":2}`, `"new":null,"old":{"id":2},"unchanged":[]`),
		ev(4, "log", pluginkit.OpInsert, `null`, `"new":{"line":"x"},"old":null,"unchanged":[]`),
		ev(5, "items", pluginkit.OpTruncate, `null`, `"new":null,"old":null,"cascade":false,"restart_identity":false`),
	}
}

// TestTombstonesSeenByKcat: what a read_committed librdkafka consumer (kcat
// -Z) reads from a compacted topic after a key change and a delete, all in
// one transaction: the Debezium convention, so that compaction forgets
// key 1 and key 2. A keyless row and a truncate each get a key of their
// own instead of sharing "null".
func TestTombstonesSeenByKcat(t *testing.T) {
	needKcat(t)
	_, addr := broker(t)
	createCompacted(t, addr, "walcast.public.items")
	createCompacted(t, addr, "walcast.public.log")
	s, _ := openSink(t, addr, map[string]any{"transactional_id": "walcast-tombstones"})
	deliver(t, s, rowEvents())

	got := readKcat(t, addr, "walcast.public.items")
	want := []string{
		`0/500:0 op=insert derived="" key={"id":1} value={"id":"0/500:0","schema":"public","table...`,
		`0/500:1 op=delete derived="old-key-delete" key={"id":1} value={"id":"0/500:1","schema":"public","table...`,
		`0/500:1 op=delete derived="tombstone" key={"id":1} value=<null>`,
		`0/500:1 op=update derived="" key={"id":2} value={"id":"0/500:1","schema":"public","table...`,
		`0/500:2 op=update derived="" key={"id":2} value={"id":"0/500:2","schema":"public","table...`,
		`0/500:3 op=delete derived="" key={"id":2} value={"id":"0/500:3","schema":"public","table...`,
		`0/500:3 op=delete derived="tombstone" key={"id":2} value=<null>`,
		`0/500:5 op=truncate derived="" key={"walcast_id":"0/500:5"} value={"id":"0/500:5","schema":"public","table...`,
	}
	checkRecords(t, "walcast.public.items", got, want)
	// The old key's delete is the update's envelope turned into a delete.
	var del struct {
		Op  string          `json:"op"`
		Key json.RawMessage `json:"key"`
		New json.RawMessage `json:"new"`
		Old json.RawMessage `json:"old"`
	}
	if len(got) > 1 && got[1].Payload != nil {
		if err := json.Unmarshal([]byte(*got[1].Payload), &del); err != nil {
			t.Fatal(err)
		}
		if del.Op != "delete" || string(del.Key) != `{"id":1}` || string(del.New) != "null" || string(del.Old) != `{"id":1}` {
			t.Errorf("old-key delete envelope = %s", *got[1].Payload)
		}
	}
	checkRecords(t, "walcast.public.log", readKcat(t, addr, "walcast.public.log"), []string{
		`0/500:4 op=insert derived="" key={"walcast_id":"0/500:4"} value={"id":"0/500:4","schema":"public","table...`,
	})
	for _, r := range got {
		t.Logf("kcat -Z saw: %s", r)
	}
}

// TestTombstonesOff: tombstones = false writes one record per event.
func TestTombstonesOff(t *testing.T) {
	needKcat(t)
	_, addr := broker(t)
	createCompacted(t, addr, "walcast.public.items")
	s, _ := openSink(t, addr, map[string]any{"transactional_id": "walcast-notomb", "tombstones": false})
	deliver(t, s, rowEvents())
	got := readKcat(t, addr, "walcast.public.items")
	checkRecords(t, "walcast.public.items", got, []string{
		`0/500:0 op=insert derived="" key={"id":1} value={"id":"0/500:0","schema":"public","table...`,
		`0/500:1 op=update derived="" key={"id":2} value={"id":"0/500:1","schema":"public","table...`,
		`0/500:2 op=update derived="" key={"id":2} value={"id":"0/500:2","schema":"public","table...`,
		`0/500:3 op=delete derived="" key={"id":2} value={"id":"0/500:3","schema":"public","table...`,
		`0/500:5 op=truncate derived="" key={"walcast_id":"0/500:5"} value={"id":"0/500:5","schema":"public","table...`,
	})
}

// TestTombstonesAbortWithTheirBatch: under eos the tombstones are part of
// the batch's transaction, so an aborted batch leaves none behind for a
// read_committed reader.
func TestTombstonesAbortWithTheirBatch(t *testing.T) {
	needKcat(t)
	_, addr := broker(t)
	createCompacted(t, addr, "walcast.public.items")
	s, _ := openSink(t, addr, map[string]any{"transactional_id": "walcast-tombabort"})
	s.beforeCommit = func(context.Context) error { return pluginkit.Retryable(fmt.Errorf("injected failure before commit")) }
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := s.Deliver(ctx, pluginkit.Batch{Events: rowEvents()}); err == nil {
		t.Fatal("Deliver succeeded despite the injected failure")
	}
	s.beforeCommit = nil
	deliver(t, s, rowEvents()[:1])
	got := readKcat(t, addr, "walcast.public.items")
	checkRecords(t, "walcast.public.items", got, []string{
		`0/500:0 op=insert derived="" key={"id":1} value={"id":"0/500:0","schema":"public","table...`,
	})
}

func checkRecords(t *testing.T, topic string, got []kcatRecord, want []string) {
	t.Helper()
	var lines []string
	for _, r := range got {
		lines = append(lines, r.String())
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s as kcat -Z reads it:\n%s\nwant:\n%s", topic, strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// With REPLICA IDENTITY FULL "old" is the whole row on every update: only a
// changed key value makes an old-key delete, and the old key keeps the key's
// column order.
func TestOldKeyDelete(t *testing.T) {
	tests := []struct {
		key, payload string
		want         string // old key, "" for none
	}{
		{`{"id":1}`, `{"op":"update","key":{"id":1},"new":{"id":1,"v":2},"old":null}`, ""},
		{`{"id":1}`, `{"op":"update","key":{"id":1},"new":{"id":1,"v":2},"old":{"id":1,"v":1}}`, ""},
		{`{"id":2}`, `{"op":"update","key":{"id":2},"new":{"id":2,"v":2},"old":{"v":1,"id":1}}`, `{"id":1}`},
		{`{"a":1,"b":"x"}`, `{"op":"update","key":{"a":1,"b":"x"},"new":{},"old":{"b":"y","a":1}}`, `{"a":1,"b":"y"}`},
		{`{"id":2}`, `{"op":"update","key":{"id":2},"old":{"other":1}}`, ""},
		// The top-level "old" is what counts, not a column of that name
		// or a string that spells it.
		{`{"id":2}`, `{"op":"update","key":{"id":2},"new":{"id":2,"old":null,"s":"\"old\":null"},"old":{"id":1,"old":null}}`, `{"id":1}`},
		{`{"id":2}`, `{"op":"update","key":{"id":2},"new":{"id":2,"s":"a\\","t":"\\\"old\":null"},"old":{"id":1}}`, `{"id":1}`},
		{`{"id":2}`, `{"op":"update","key":{"id":2},"new":{"id":2,"old":{"id":1}},"old":null}`, ""},
		{`{"id":2}`, `{"op":"update", "key" : {"id":2} , "old" : {"id":1} , "unchanged":[]}`, `{"id":1}`},
	}
	for _, tt := range tests {
		oldKey, del, ok := oldKeyDelete(&pluginkit.Event{Key: []byte(tt.key), Payload: []byte(tt.payload)})
		if string(oldKey) != tt.want || ok != (tt.want != "") {
			t.Errorf("oldKeyDelete(%s, %s) = %s, %v; want %s", tt.key, tt.payload, oldKey, ok, tt.want)
		}
		if ok && !json.Valid(del) {
			t.Errorf("delete envelope is not JSON: %s", del)
		}
	}
}

func TestTopicNames(t *testing.T) {
	st := settings{topicPrefix: "walcast", topics: map[string]string{"public.order lines": "order-lines"}}
	for in, want := range map[string]string{
		"public.orders":      "walcast.public.orders",
		"public.café":        "walcast.public.caf_",
		"Sales.Q$1":          "walcast.Sales.Q_1",
		"public.order lines": "order-lines",
		".":                  "walcast.message", // a message event
	} {
		schema, table, _ := strings.Cut(in, ".")
		if got := st.topicFor(schema, table); got != want {
			t.Errorf("topicFor(%s) = %q, want %q", in, got, want)
		}
	}
	err := checkTopics(st, []string{"public.café", "public.caf_", "public.orders"})
	ces := pluginkit.ConfigErrors(err)
	if len(ces) != 1 || ces[0].Table != "public.caf_" || ces[0].Field != "" {
		t.Errorf("checkTopics = %v, want one collision error for public.caf_", err)
	}
}

// An update that did not change its key, as the benchmark's workload makes
// them: the common case oldKeyDelete must settle cheaply.
func BenchmarkOldKeyDeleteUnchanged(b *testing.B) {
	key := []byte(`{"id":4242}`)
	payload := []byte(`{"id":"0/1A2B3C8:7","commit_lsn":"0/1A2B3C8","xid":812,"commit_time":"2026-11-30T13:58:42.023939Z","schema":"public","table":"bench","op":"update","key":{"id":4242},"new":{"id":4242,"account":242,"name":"customer-4242","amount":43.42,"payload":"0f7e44a922df352c05c5f73cb40ba115d7e44a922df352c05c5f73cb40ba1151","updated_at":"2026-11-30T13:58:40.123456Z"},"old":null}`)
	ev := &pluginkit.Event{Key: key, Payload: payload}
	for b.Loop() {
		if _, _, ok := oldKeyDelete(ev); ok {
			b.Fatal("unchanged key reported as changed")
		}
	}
}

// A Debezium update that changed the key is split as Debezium's connector
// splits a primary key update: a delete of the old key, then the event as
// a create; with schemas the wrappers are kept. Other events are not.
func TestDebeziumKeyChange(t *testing.T) {
	const src = `"source":{"connector":"postgresql","lsn":1},`
	tests := []struct {
		key, payload        string
		oldKey, del, create string // "" when not split
	}{
		{`{"id":2}`, `{"before":{"id":1,"v":null},"after":{"id":2,"v":5},` + src + `"op":"u","ts_ms":1}`,
			`{"id":1}`,
			`{"before":{"id":1,"v":null},"after":null,` + src + `"op":"d","ts_ms":1}`,
			`{"before":null,"after":{"id":2,"v":5},` + src + `"op":"c","ts_ms":1}`},
		{`{"schema":{"k":1},"payload":{"id":2}}`, `{"schema":{"v":1},"payload":{"before":{"id":1},"after":{"id":2},"op":"u"}}`,
			`{"schema":{"k":1},"payload":{"id":1}}`,
			`{"schema":{"v":1},"payload":{"before":{"id":1},"after":null,"op":"d"}}`,
			`{"schema":{"v":1},"payload":{"before":null,"after":{"id":2},"op":"c"}}`},
		// Key unchanged (REPLICA IDENTITY FULL), no before, other ops, the envelope.
		{`{"id":1}`, `{"before":{"id":1,"v":1},"after":{"id":1,"v":2},"op":"u"}`, "", "", ""},
		{`{"id":1}`, `{"before":null,"after":{"id":1,"v":2},"op":"u"}`, "", "", ""},
		{`{"id":1}`, `{"before":{"id":1},"after":null,"op":"d"}`, "", "", ""},
		{`{"id":2}`, `{"op":"update","key":{"id":2},"new":{"id":2},"old":{"id":1}}`, "", "", ""},
	}
	for _, tt := range tests {
		kc, ok := debeziumKeyChange(&pluginkit.Event{Key: []byte(tt.key), Payload: []byte(tt.payload)})
		if ok != (tt.oldKey != "") || string(kc.oldKey) != tt.oldKey || string(kc.del) != tt.del || string(kc.create) != tt.create {
			t.Errorf("debeziumKeyChange(%s, %s) = %v\n old key %s\n del %s\n create %s", tt.key, tt.payload, ok, kc.oldKey, kc.del, kc.create)
		}
	}
}
