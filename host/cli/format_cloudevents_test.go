package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/jackc/pgx/v5"
)

// format = "cloudevents" read by a client nobody here wrote: the official
// CloudEvents Go SDK parses every request a webhook sink sends (structured,
// binary and batched content modes) and every record a Kafka sink wrote
// (structured and binary), and each event's attributes must be what the
// source committed, as test_decoding saw it.

// ceWorkload is the changes every CloudEvents test commits: inserts,
// updates, a key change, deletes, a truncate and inserts after it.
var ceWorkload = []string{
	`INSERT INTO items SELECT g, g, 'x' FROM generate_series(1, 30) g`,
	`UPDATE items SET v = v + 100 WHERE id BETWEEN 5 AND 15`,
	`UPDATE items SET id = id + 1000 WHERE id IN (7, 27)`,
	`DELETE FROM items WHERE id IN (8, 28, 1007)`,
	`TRUNCATE items`,
	`INSERT INTO items SELECT g, g, 'y' FROM generate_series(1, 5) g`,
}

// ceHook is a webhook receiver that reads each request with the SDK.
type ceHook struct {
	mode   string
	mu     sync.Mutex
	events []cloudevents.Event
	bad    []string
}

func (h *ceHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	evs, err := h.read(r)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.bad = append(h.bad, err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.events = append(h.events, evs...)
}

// read parses one request in the hook's content mode, checking that it
// is that mode.
func (h *ceHook) read(r *http.Request) ([]cloudevents.Event, error) {
	ct := r.Header.Get("Content-Type")
	switch h.mode {
	case "batch":
		if !cehttp.IsHTTPBatch(r.Header) {
			return nil, fmt.Errorf("batch mode, Content-Type %q", ct)
		}
		return cehttp.NewEventsFromHTTPRequest(r)
	case "binary":
		if r.Header.Get("Ce-Specversion") != "1.0" || ct != "application/json" {
			return nil, fmt.Errorf("binary mode, ce-specversion %q, Content-Type %q", r.Header.Get("Ce-Specversion"), ct)
		}
		// The HTTP binding percent-encodes header values; the SDK
		// leaves that to the receiver.
		for k, vs := range r.Header {
			if strings.HasPrefix(k, "Ce-") {
				v, err := url.PathUnescape(vs[0])
				if err != nil {
					return nil, fmt.Errorf("header %s: %w", k, err)
				}
				r.Header.Set(k, v)
			}
		}
	default:
		if ct != "application/cloudevents+json" {
			return nil, fmt.Errorf("structured mode, Content-Type %q", ct)
		}
	}
	e, err := cehttp.NewEventFromHTTPRequest(r)
	if err != nil {
		return nil, err
	}
	return []cloudevents.Event{*e}, nil
}

func (h *ceHook) snapshot() ([]cloudevents.Event, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]cloudevents.Event(nil), h.events...), append([]string(nil), h.bad...)
}

// runCloudEvents runs ceWorkload through a pipeline with one sink and
// returns the truth and the database name once the slot confirmed all.
func runCloudEvents(t *testing.T, name string, sink sinkSpec, db *pgx.Conn, dsn string) []change {
	t.Helper()
	truthSlot(t, dsn, db, "truth_"+name)
	proc := startWalcast(t, writePipeline(t, name, dsn, []string{"public.items"}, sink))
	defer proc.stop()
	// Not waitSlot: the slot is listed while it waits for the cluster's
	// running transactions, and a change committed before it is
	// consistent is not in it.
	proc.waitLog(t, "streaming from slot")
	for _, sql := range ceWorkload {
		exec1(t, db, sql)
	}
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "the slot to confirm everything", time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_"+name) >= end
	})
	return truth(t, db, "truth_"+name, map[string]bool{"public.items": true})
}

// checkCloudEvents checks each event's attributes against its data (the
// envelope), the pipeline and the type prefix, then the events against
// the truth.
func checkCloudEvents(t *testing.T, db *pgx.Conn, pipeline, typePrefix string, want []change, evs []cloudevents.Event) {
	t.Helper()
	var database string
	if err := db.QueryRow(t.Context(), `SELECT current_database()`).Scan(&database); err != nil {
		t.Fatal(err)
	}
	source := "/walcast/" + pipeline + "/" + database + "/public/items"
	var got []received
	for _, e := range evs {
		if err := e.Validate(); err != nil {
			t.Fatalf("event %s: not a valid CloudEvent: %v", e.ID(), err)
		}
		var env struct {
			envelope
			CommitLSN  string    `json:"commit_lsn"`
			CommitTime time.Time `json:"commit_time"`
		}
		if err := json.Unmarshal(e.Data(), &env); err != nil {
			t.Fatalf("event %s: data is not the envelope: %v: %s", e.ID(), err, e.Data())
		}
		subject := ""
		if string(env.Key) != "null" {
			var key bytes.Buffer
			json.Compact(&key, env.Key)
			subject = key.String()
		}
		ext := e.Extensions()
		if e.ID() != env.ID || e.Source() != source || e.Type() != typePrefix+".public.items."+env.Op || e.Subject() != subject ||
			!e.Time().Equal(env.CommitTime) || e.DataContentType() != "application/json" ||
			fmt.Sprint(ext["commitlsn"]) != env.CommitLSN || fmt.Sprint(ext["xid"]) != fmt.Sprint(env.Xid) {
			t.Fatalf("event %s: attributes do not match the change:\n%s\ndata %s", e.ID(), e.String(), e.Data())
		}
		r, err := env.envelope.received(e.Data())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	dups := verify(t, want, got)
	t.Logf("%d CloudEvents (%d duplicates) for %d committed changes, attributes as committed", len(evs), dups, len(want))
}

// TestCloudEventsWebhook: a webhook sink with format = "cloudevents" in
// each cloudevents_mode; the SDK accepts every request and every event.
func TestCloudEventsWebhook(t *testing.T) {
	parallel(t)
	for _, mode := range []string{"structured", "binary", "batch"} {
		t.Run(mode, func(t *testing.T) {
			parallel(t)
			dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
			hook := &ceHook{mode: mode}
			url := serveLoopback(t, hook) + "/hooks"
			name := "cehook" + mode
			// The batch mode also sets the type prefix.
			top, typePrefix := "  format = \"cloudevents\"\n", "com.walcast"
			if mode == "batch" {
				top, typePrefix = top+"  cloudevents {\n    type_prefix = \"com.example.shop\"\n  }\n", "com.example.shop"
			}
			want := runCloudEvents(t, name, sinkSpec{
				ID: "hook", Top: top,
				Config: fmt.Sprintf("    url = %q\n    cloudevents_mode = %q\n", url, mode),
			}, db, dsn)
			evs, bad := hook.snapshot()
			if len(bad) > 0 {
				t.Fatalf("%d requests the SDK refused, the first: %s", len(bad), bad[0])
			}
			checkCloudEvents(t, db, name, typePrefix, want, evs)
		})
	}
}

// TestCloudEventsKafka: a kafka sink with format = "cloudevents" in each
// cloudevents_mode; what kcat reads back (read_committed) is turned into
// events by the SDK's binding, every record one CloudEvent.
func TestCloudEventsKafka(t *testing.T) {
	parallel(t)
	needKcat(t)
	addr := startKafka(t)
	for _, mode := range []string{"structured", "binary"} {
		t.Run(mode, func(t *testing.T) {
			parallel(t)
			dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
			name := "cekafka" + mode
			prefix := "ce" + mode
			cfg := kafkaConfig(addr, true, "walcast-"+name) + fmt.Sprintf("    topic_prefix = %q\n    cloudevents_mode = %q\n", prefix, mode)
			want := runCloudEvents(t, name, sinkSpec{ID: "kafka", SinkType: "kafka", Config: cfg, Top: "  format = \"cloudevents\"\n"}, db, dsn)
			var evs []cloudevents.Event
			for _, r := range readKcat(t, addr, prefix+".public.items") {
				m := kafkaMessage(r)
				if enc := m.ReadEncoding(); (mode == "binary") != (enc == binding.EncodingBinary) || enc == binding.EncodingUnknown {
					t.Fatalf("offset %d: encoding %s in %s mode (headers %v)", r.Offset, enc, mode, r.Headers)
				}
				e, err := binding.ToEvent(context.Background(), m)
				if err != nil {
					t.Fatalf("offset %d: the SDK cannot read the record: %v (headers %v)", r.Offset, err, r.Headers)
				}
				if r.Headers["walcast-id"] != e.ID() {
					t.Errorf("offset %d: walcast-id %s, event id %s", r.Offset, r.Headers["walcast-id"], e.ID())
				}
				evs = append(evs, *e)
			}
			checkCloudEvents(t, db, name, "com.walcast", want, evs)
		})
	}
}

// kafkaMessage reads a Kafka record as the CloudEvents Kafka protocol
// binding lays it out, for the SDK's binding.ToEvent: structured when its
// content-type is application/cloudevents+json, binary when it has a
// ce_specversion header (as the SDK's own Kafka bindings do).
type kafkaMessage kafkaRecord

var ceKafkaSpecs = spec.WithPrefix("ce_")

func (m kafkaMessage) ReadEncoding() binding.Encoding {
	switch {
	case strings.HasPrefix(m.Headers["content-type"], "application/cloudevents+json"):
		return binding.EncodingStructured
	case ceKafkaSpecs.Version(m.Headers["ce_specversion"]) != nil:
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

func (m kafkaMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.ReadEncoding() != binding.EncodingStructured {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, format.JSON, bytes.NewReader(m.Value))
}

func (m kafkaMessage) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	v := ceKafkaSpecs.Version(m.Headers["ce_specversion"])
	if v == nil {
		return binding.ErrNotBinary
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	for k, val := range m.Headers {
		var err error
		switch {
		case k == "content-type":
			err = w.SetAttribute(v.AttributeFromKind(spec.DataContentType), val)
		case strings.HasPrefix(k, "ce_"):
			if a := v.Attribute(k); a != nil {
				err = w.SetAttribute(a, val)
			} else {
				err = w.SetExtension(strings.TrimPrefix(k, "ce_"), val)
			}
		}
		if err != nil {
			return err
		}
	}
	if err := w.SetData(bytes.NewReader(m.Value)); err != nil {
		return err
	}
	return w.End(ctx)
}

// GetAttribute and GetExtension read the record's ce_ headers, as
// binding.MessageMetadataReader (the SDK asks for it in binary mode).
func (m kafkaMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	v := ceKafkaSpecs.Version(m.Headers["ce_specversion"])
	if v == nil {
		return nil, nil
	}
	a := v.AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	name := a.PrefixedName()
	if k == spec.DataContentType {
		name = "content-type"
	}
	if val, ok := m.Headers[name]; ok {
		return a, val
	}
	return a, nil
}

func (m kafkaMessage) GetExtension(name string) any {
	if v, ok := m.Headers["ce_"+name]; ok {
		return v
	}
	return nil
}

func (m kafkaMessage) Finish(error) error { return nil }

var _ binding.MessageMetadataReader = kafkaMessage{}
