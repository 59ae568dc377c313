package decode

import (
	"testing"

	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/walcast/walcast/host/internal/change"
)

// BenchmarkDecodeInsert measures one insert of a typical ~120-byte row. The
// target is one allocation per event: the payload the event owns (its Key
// is a window into it).
func BenchmarkDecodeInsert(b *testing.B) { benchDecodeInsert(b, Options{}) }

// BenchmarkDecodeInsertDebezium is the same insert with a sink on the
// debezium format: the envelope plus the Debezium event (docs/formats.md,
// "Cost"); with schemas, the pre-encoded schema blocks are copied in too.
func BenchmarkDecodeInsertDebezium(b *testing.B) {
	for _, schemas := range []bool{false, true} {
		name := "schemas=false"
		if schemas {
			name = "schemas=true"
		}
		b.Run(name, func(b *testing.B) {
			benchDecodeInsert(b, Options{Formats: []Format{{Name: FormatDebezium, Debezium: DebeziumOptions{
				Name: "shop", Database: "shop", Version: "walcast", Schemas: schemas}}}})
		})
	}
}

// BenchmarkDecodeInsertSequin is the same insert with a sink on the sequin
// format, built from the envelope's parts.
func BenchmarkDecodeInsertSequin(b *testing.B) {
	benchDecodeInsert(b, Options{Formats: []Format{{Name: FormatSequin, Sequin: SequinOptions{
		Consumer: "hook", Database: "shop", Hostname: "db.example.com"}}}})
}

func benchDecodeInsert(b *testing.B, opts Options) {
	d := New(opts)
	rel := pgt.Relation(1, "public", "orders", 'd',
		pgt.Column("id", pgtype.Int8OID, true),
		pgt.Column("customer_id", pgtype.Int4OID, false),
		pgt.Column("status", pgtype.TextOID, false),
		pgt.Column("total", pgtype.NumericOID, false),
		pgt.Column("note", pgtype.TextOID, false),
		pgt.Column("created_at", pgtype.TimestamptzOID, false),
	)
	ins := &pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple(
		"9000000042", "771234", "paid", "1234.50",
		"leave at the back door, ring twice, thanks!",
		"2026-11-30 10:00:00.123456+00",
	)}
	var sink change.Event
	emit := func(ev change.Event) error { sink = ev; return nil }
	for _, m := range []pglogrepl.Message{pgt.Begin(0x1A2B3C8, 7412), rel} {
		if err := d.Decode(m, emit); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Decode(ins, emit); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(sink.Payload)))
}

// BenchmarkDecodeInsertCloudEvents is the same insert with a sink on the
// cloudevents format: the envelope, then a copy of it as the event's data
// behind the CloudEvents attributes.
func BenchmarkDecodeInsertCloudEvents(b *testing.B) {
	benchDecodeInsert(b, Options{Formats: []Format{{Name: FormatCloudEvents, CloudEvents: CloudEventsOptions{
		Source: "/walcast/shop/shop"}}}})
}
