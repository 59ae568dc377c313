package decode

import (
	"encoding/base64"
	"encoding/json"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pglogrepl"

	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"
)

// customers is the table of Debezium's PostgreSQL connector documentation
// ("Data change events"): id serial primary key, first_name, last_name and
// email varchar(255).
func customers(id uint32) *pglogrepl.RelationMessage {
	return pgt.Relation(id, "public", "customers", 'd',
		pgt.Column("id", 23, true),
		pgt.Column("first_name", 1043, false),
		pgt.Column("last_name", 1043, false),
		pgt.Column("email", 1043, false),
	)
}

var dbzOpts = DebeziumOptions{Name: "PostgreSQL_server", Database: "postgres", Version: "walcast-test"}

// dbzEvents decodes msgs with the debezium format and returns each event's
// key and value, parsed.
func dbzEvents(t *testing.T, opts DebeziumOptions, msgs ...pglogrepl.Message) (keys, values []map[string]any) {
	t.Helper()
	c := newCollector(t, Options{Formats: []Format{{Name: FormatDebezium, Debezium: opts}}})
	c.feed(msgs...)
	for _, ev := range c.events {
		if len(ev.Formats) != 1 {
			t.Fatalf("event %s has %d formats, want 1", ev.ID, len(ev.Formats))
		}
		var k, v map[string]any
		if err := json.Unmarshal(ev.Formats[0].Key, &k); err != nil {
			t.Fatalf("event %s: key %s: %v", ev.ID, ev.Formats[0].Key, err)
		}
		if err := json.Unmarshal(ev.Formats[0].Payload, &v); err != nil {
			t.Fatalf("event %s: value %s: %v", ev.ID, ev.Formats[0].Payload, err)
		}
		keys, values = append(keys, k), append(values, v)
	}
	return keys, values
}

// The examples of Debezium's documentation (postgresql.adoc, "create
// events", "update events", "delete events", "truncate events"), payload
// only: every field it shows is there with the value it shows, except the
// ones that depend on when and where the change happened.
func TestDebeziumDocumentedExamples(t *testing.T) {
	keys, values := dbzEvents(t, dbzOpts,
		pgt.Begin(24023128, 555), customers(1),
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("1", "Anne", "Kretchmar", "annek@noanswer.org")},
		&pglogrepl.UpdateMessage{RelationID: 1, NewTuple: pgt.Tuple("1", "Anne Marie", "Kretchmar", "annek@noanswer.org")},
		&pglogrepl.DeleteMessage{RelationID: 1, OldTupleType: 'K', OldTuple: pgt.Tuple("1", nil, nil, nil)},
		&pglogrepl.TruncateMessage{RelationNum: 1, RelationIDs: []uint32{1}},
	)
	source := func(values map[string]any) map[string]any {
		src := values["source"].(map[string]any)
		for _, f := range []string{"version", "connector", "name", "ts_ms", "ts_us", "ts_ns", "snapshot", "db", "sequence", "schema", "table", "txId", "lsn", "xmin"} {
			if _, ok := src[f]; !ok {
				t.Errorf("source has no %q: %v", f, src)
			}
		}
		return src
	}
	after := map[string]any{"id": 1.0, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
	want := []struct {
		op            string
		before, after any
	}{
		{"c", nil, after},
		{"u", nil, map[string]any{"id": 1.0, "first_name": "Anne Marie", "last_name": "Kretchmar", "email": "annek@noanswer.org"}},
		// Documented as {"id": 1}; the JSON converter writes every field
		// of the row's schema, the others null (docs/formats.md).
		{"d", map[string]any{"id": 1.0, "first_name": nil, "last_name": nil, "email": nil}, nil},
		{"t", nil, nil},
	}
	if len(values) != len(want) {
		t.Fatalf("got %d events, want %d", len(values), len(want))
	}
	for i, w := range want {
		v := values[i]
		if v["op"] != w.op || !reflect.DeepEqual(v["before"], w.before) || !reflect.DeepEqual(v["after"], w.after) {
			t.Errorf("event %d: op %v before %v after %v, want %s %v %v", i, v["op"], v["before"], v["after"], w.op, w.before, w.after)
		}
		src := source(v)
		if src["connector"] != "postgresql" || src["name"] != "PostgreSQL_server" || src["db"] != "postgres" ||
			src["schema"] != "public" || src["table"] != "customers" || src["txId"] != 555.0 || src["lsn"] != 24023128.0 ||
			src["snapshot"] != "false" || src["xmin"] != nil || src["version"] != "walcast-test" {
			t.Errorf("event %d: source %v", i, src)
		}
		if src["sequence"] != `["24023128","24023128"]` {
			t.Errorf("event %d: sequence %v", i, src["sequence"])
		}
		ms := float64(pgt.CommitTime.UnixMilli())
		if src["ts_ms"] != ms || v["ts_ms"] != ms || v["ts_us"] != float64(pgt.CommitTime.UnixMicro()) {
			t.Errorf("event %d: ts_ms %v %v, want %v", i, src["ts_ms"], v["ts_ms"], ms)
		}
		// The transaction block names the event as its walcast id does:
		// commit LSN and index + 1.
		wantTx := map[string]any{"id": "555:24023128", "total_order": float64(i + 1), "data_collection_order": float64(i + 1)}
		if !reflect.DeepEqual(v["transaction"], wantTx) {
			t.Errorf("event %d: transaction %v, want %v", i, v["transaction"], wantTx)
		}
	}
	for i, k := range []any{map[string]any{"id": 1.0}, map[string]any{"id": 1.0}, map[string]any{"id": 1.0}, nil} {
		var got any = keys[i]
		if keys[i] == nil {
			got = nil
		}
		if !reflect.DeepEqual(got, k) {
			t.Errorf("event %d: key %v, want %v", i, keys[i], k)
		}
	}
}

// With schemas, key and value are {"schema":…,"payload":…} and the schemas
// name and type the fields as the documentation's examples do.
func TestDebeziumSchemas(t *testing.T) {
	opts := dbzOpts
	opts.Schemas = true
	keys, values := dbzEvents(t, opts, pgt.Begin(24023128, 555), customers(1),
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("1", "Anne", "Kretchmar", "annek@noanswer.org")})
	ks := keys[0]["schema"].(map[string]any)
	if ks["name"] != "PostgreSQL_server.public.customers.Key" || ks["type"] != "struct" || ks["optional"] != false {
		t.Errorf("key schema %v", ks)
	}
	kf := ks["fields"].([]any)[0].(map[string]any)
	if len(ks["fields"].([]any)) != 1 || kf["field"] != "id" || kf["type"] != "int32" || kf["optional"] != false {
		t.Errorf("key schema fields %v", ks["fields"])
	}
	if !reflect.DeepEqual(keys[0]["payload"], map[string]any{"id": 1.0}) {
		t.Errorf("key payload %v", keys[0]["payload"])
	}
	vs := values[0]["schema"].(map[string]any)
	if vs["name"] != "PostgreSQL_server.public.customers.Envelope" || vs["type"] != "struct" {
		t.Errorf("value schema %v", vs["name"])
	}
	var names []string
	for _, f := range vs["fields"].([]any) {
		fm := f.(map[string]any)
		names = append(names, fm["field"].(string))
		switch fm["field"] {
		case "before", "after":
			if fm["name"] != "PostgreSQL_server.public.customers.Value" {
				t.Errorf("%s schema name %v", fm["field"], fm["name"])
			}
			var cols []string
			for _, c := range fm["fields"].([]any) {
				cm := c.(map[string]any)
				cols = append(cols, cm["field"].(string)+":"+cm["type"].(string))
			}
			if want := []string{"id:int32", "first_name:string", "last_name:string", "email:string"}; !slices.Equal(cols, want) {
				t.Errorf("%s fields %v, want %v", fm["field"], cols, want)
			}
		case "source":
			if fm["name"] != "io.debezium.connector.postgresql.Source" {
				t.Errorf("source schema name %v", fm["name"])
			}
			var srcNames []string
			for _, c := range fm["fields"].([]any) {
				srcNames = append(srcNames, c.(map[string]any)["field"].(string))
			}
			// Every field of the payload's source block is described.
			src := values[0]["payload"].(map[string]any)["source"].(map[string]any)
			for f := range src {
				if !slices.Contains(srcNames, f) {
					t.Errorf("source field %q has no schema", f)
				}
			}
		}
	}
	if want := []string{"before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction"}; !slices.Equal(names, want) {
		t.Errorf("envelope fields %v, want %v", names, want)
	}
	payload := values[0]["payload"].(map[string]any)
	for _, f := range names {
		if _, ok := payload[f]; !ok {
			t.Errorf("payload has no %q", f)
		}
	}
}

// Values of each type as Debezium's documentation maps them.
func TestDebeziumValues(t *testing.T) {
	b64 := func(b ...byte) string { return `"` + base64.StdEncoding.EncodeToString(b) + `"` }
	numeric := func(p, s int32) int32 { return (p<<16 | s) + 4 }
	cases := []struct {
		oid    uint32
		typmod int32
		mode   string
		text   string
		want   string
	}{
		{16, -1, "", "t", "true"},
		{1560, 1, "", "1", "true"}, // bit(1)
		{21, -1, "", "-7", "-7"},
		{23, -1, "", "42", "42"},
		{20, -1, "", "9007199254740993", "9007199254740993"},
		{701, -1, "", "NaN", `"NaN"`},
		{1043, -1, "", "a\"b", `"a\"b"`},
		{17, -1, "", `\x0001ff`, b64(0, 1, 0xff)},
		{3802, -1, "", `{"a": [1, 2]}`, `"{\"a\": [1, 2]}"`},
		{2950, -1, "", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		// numeric(5,2): the unscaled value, two's complement, shortest.
		{1700, numeric(5, 2), "", "1.00", b64(0x64)},
		{1700, numeric(5, 2), "", "-0.01", b64(0xff)},
		{1700, numeric(5, 2), "", "1.28", b64(0x00, 0x80)},
		{1700, numeric(5, 2), "", "-1.29", b64(0xff, 0x7f)},
		{1700, numeric(5, 2), "", "NaN", "null"},
		{1700, -1, "", "3.140", `{"scale":3,"value":` + b64(0x0c, 0x44) + `}`},
		{1700, -1, "", "12", `{"scale":0,"value":` + b64(0x0c) + `}`},
		{1700, numeric(5, 2), DecimalDouble, "-1.29", "-1.29"},
		{1700, numeric(5, 2), DecimalDouble, "NaN", `"NaN"`},
		{1700, -1, DecimalString, "1.290", `"1.290"`},
		{790, -1, "", "-$1,234.56", b64(0xfe, 0x1d, 0xc0)}, // -123456
		{790, -1, DecimalString, "$1,234.56", `"1234.56"`},
		{1082, -1, "", "1970-01-02", "1"},
		{1082, -1, "", "1969-12-31", "-1"},
		{1083, -1, "", "01:00:00.5", "3600500000"}, // time: MicroTime
		{1083, 3, "", "01:00:00.5", "3600500"},     // time(3): Time, ms
		// The documentation's example: "2018-06-20 15:13:16.945104" is
		// MicroTimestamp 1529507596945104.
		{1114, -1, "", "2018-06-20 15:13:16.945104", "1529507596945104"},
		{1114, 3, "", "2018-06-20 15:13:16.945", "1529507596945"},
		{1114, -1, "", "infinity", "9223372036825200000"},
		{1114, -1, "", "-infinity", "-9223372036832400000"},
		{1184, -1, "", "2018-06-20 15:13:16.9451+02", `"2018-06-20T13:13:16.9451Z"`},
		{1184, -1, "", "2018-06-20 15:13:16+00", `"2018-06-20T15:13:16Z"`},
		{1184, 3, "", "2018-06-20 15:13:16.9+00", `"2018-06-20T15:13:16.900Z"`},
		{1266, -1, "", "10:00:00.25+02", `"08:00:00.25Z"`},
		{1266, -1, "", "01:00:00-03", `"04:00:00Z"`},
		{1186, -1, "", "1 year 2 mons 3 days 04:05:06.78", strconv.FormatInt(int64(((14*daysPerMonth+3)*86400+4*3600+5*60+6.78)*1e6), 10)},
		{1186, -1, "", "-1 days -00:00:01", "-86401000000"},
		{1007, -1, "", "{1,NULL,3}", "[1,null,3]"},
		{3807, -1, "", `{"{\"a\":1}"}`, `["{\"a\":1}"]`}, // jsonb[]: strings, as Json
		{650, -1, "", "10.0.0.0/8", `"10.0.0.0/8"`},      // cidr
	}
	d := New(Options{})
	for _, c := range cases {
		col := &column{typ: lookupType(c.oid)}
		dc := dbzColumnFor(c.oid, c.typmod, c.mode)
		got := string(d.appendDbzValue(nil, &dc, col, []byte(c.text)))
		if got != c.want {
			t.Errorf("oid %d typmod %d %s %q: got %s, want %s", c.oid, c.typmod, c.mode, c.text, got, c.want)
		}
	}
}

// The unscaled bytes are what Java's BigInteger.toByteArray gives, for
// values beyond 64 bits too.
func TestDebeziumUnscaledBig(t *testing.T) {
	for _, s := range []string{"123456789012345678901234567890", "-123456789012345678901234567890", "-170141183460469231731687303715884105728", "0", "-1", "255", "-256", "999999999999999999", "-999999999999999999", "-9999999999999999999"} {
		enc, ok := appendUnscaled(nil, []byte(s), 0)
		if !ok {
			t.Fatalf("%s: not a decimal", s)
		}
		got, err := base64.StdEncoding.DecodeString(string(enc))
		if err != nil {
			t.Fatal(err)
		}
		// Decode as two's complement and compare.
		v := new(big.Int).SetBytes(got)
		if len(got) > 0 && got[0]&0x80 != 0 {
			v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(got))))
		}
		want, _ := new(big.Int).SetString(s, 10)
		if v.Cmp(want) != 0 {
			t.Errorf("%s: bytes %x decode to %s", s, got, v)
		}
		// Shortest form: the first byte is not a redundant sign byte.
		if len(got) > 1 && (got[0] == 0 && got[1]&0x80 == 0 || got[0] == 0xff && got[1]&0x80 != 0) {
			t.Errorf("%s: bytes %x are not the shortest form", s, got)
		}
	}
}

// An unchanged TOASTed value is Debezium's placeholder; a key change
// carries the old key in the format's own form for the scheduler.
func TestDebeziumToastAndKeyChange(t *testing.T) {
	c := newCollector(t, Options{Formats: []Format{{Name: FormatDebezium, Debezium: dbzOpts}}})
	c.feed(pgt.Begin(0x1A2B3C8, 7412), pgt.Orders(1),
		&pglogrepl.UpdateMessage{RelationID: 1, NewTuple: pgt.Tuple("42", "paid", "1.00", pgt.Toast)},
		&pglogrepl.UpdateMessage{RelationID: 1, OldTupleType: 'K', OldTuple: pgt.Tuple("42", nil, nil, nil), NewTuple: pgt.Tuple("43", "paid", nil, "x")},
	)
	var v map[string]any
	if err := json.Unmarshal(c.events[0].Formats[0].Payload, &v); err != nil {
		t.Fatal(err)
	}
	if got := v["after"].(map[string]any)["notes_blob"]; got != unavailable {
		t.Errorf("unchanged TOASTed value = %v, want %s", got, unavailable)
	}
	f := c.events[1].Formats[0]
	if string(f.Key) != `{"id":43}` || string(f.OldKey) != `{"id":42}` {
		t.Errorf("key change: key %s old key %s", f.Key, f.OldKey)
	}
	if c.events[0].Formats[0].OldKey != nil {
		t.Errorf("update without key change has old key %s", c.events[0].Formats[0].OldKey)
	}
}

// A backfill read is op "r" with snapshot "incremental", and a column's
// type modifier, carried in the chunk, gives it the same Debezium type as
// the table's live events (numeric(5,2): Decimal, not VariableScaleDecimal).
func TestDebeziumBackfillRead(t *testing.T) {
	typmod := (int32(5)<<16 | 2) + 4
	chunk := BackfillChunk{
		Pipeline: "p", Backfill: 1, Chunk: 1, Schema: "public", Table: "prices",
		Columns: []BackfillColumn{{Name: "id", Type: 23}, {Name: "amount", Type: 1700, Typmod: &typmod}},
		Key:     []int{0},
		Rows:    [][]*string{{strp("1"), strp("1.00")}},
	}
	c := newCollector(t, Options{Pipeline: "p", Formats: []Format{{Name: FormatDebezium, Debezium: dbzOpts}}})
	c.feed(pgt.Begin(0x1A2B3C8, 9), packedMessage(t, chunk))
	var v struct {
		Op     string         `json:"op"`
		After  map[string]any `json:"after"`
		Before map[string]any `json:"before"`
		Source map[string]any `json:"source"`
	}
	if err := json.Unmarshal(c.events[0].Formats[0].Payload, &v); err != nil {
		t.Fatal(err)
	}
	if v.Op != "r" || v.Source["snapshot"] != "incremental" || v.Before != nil || v.After["amount"] != "ZA==" {
		t.Errorf("read event: op %s snapshot %v before %v after %v", v.Op, v.Source["snapshot"], v.Before, v.After)
	}
	if string(c.events[0].Formats[0].Key) != `{"id":1}` {
		t.Errorf("key %s", c.events[0].Formats[0].Key)
	}
}
