package decode

import (
	"encoding/json"
	"strings"
	"testing"

	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"

	"github.com/jackc/pgx/v5/pgtype"
)

// valueJSON encodes one text value of a column of type oid.
func valueJSON(oid uint32, text string) string {
	d := New(Options{})
	c := column{typ: lookupType(oid)}
	return string(d.appendColumnValue(nil, &c, pgt.Tuple(text).Columns[0]))
}

func TestValues(t *testing.T) {
	tests := []struct {
		name string
		oid  uint32
		text string
		want string
	}{
		{"int2", pgtype.Int2OID, "-32768", `-32768`},
		{"int4", pgtype.Int4OID, "42", `42`},
		{"int8", pgtype.Int8OID, "9223372036854775807", `9223372036854775807`},
		{"oid", pgtype.OIDOID, "4294967295", `4294967295`},
		{"xid", pgtype.XIDOID, "7412", `7412`},
		{"int garbage", pgtype.Int4OID, "12abc", `"12abc"`},
		{"int leading zero", pgtype.Int4OID, "012", `"012"`},
		{"float8", pgtype.Float8OID, "3.14", `3.14`},
		{"float8 exp", pgtype.Float8OID, "1e+100", `1e+100`},
		{"float8 small", pgtype.Float8OID, "-1.5e-07", `-1.5e-07`},
		{"float8 -0", pgtype.Float8OID, "-0", `-0`},
		{"float8 NaN", pgtype.Float8OID, "NaN", `"NaN"`},
		{"float8 Infinity", pgtype.Float8OID, "Infinity", `"Infinity"`},
		{"float4 -Infinity", pgtype.Float4OID, "-Infinity", `"-Infinity"`},
		{"numeric", pgtype.NumericOID, "12345678901234567890.000000000001", `"12345678901234567890.000000000001"`},
		{"numeric NaN", pgtype.NumericOID, "NaN", `"NaN"`},
		{"bool t", pgtype.BoolOID, "t", `true`},
		{"bool f", pgtype.BoolOID, "f", `false`},
		{"bool odd", pgtype.BoolOID, "maybe", `"maybe"`},
		{"jsonb", pgtype.JSONBOID, `{"a": [1, 2, {"b": "x y"}], "c": null}`, `{"a":[1,2,{"b":"x y"}],"c":null}`},
		{"json keeps strings", pgtype.JSONOID, "{\n  \"k\" : \"a \\\" b\"\n}", `{"k":"a \" b"}`},
		{"json scalar", pgtype.JSONOID, `"s"`, `"s"`},
		{"json invalid", pgtype.JSONOID, `{nope`, `"{nope"`},
		{"bytea", pgtype.ByteaOID, `\x0a0b0c`, `"CgsM"`},
		{"bytea 1", pgtype.ByteaOID, `\xff`, `"/w=="`},
		{"bytea 2", pgtype.ByteaOID, `\xfffe`, `"//4="`},
		{"bytea empty", pgtype.ByteaOID, `\x`, `""`},
		{"bytea upper", pgtype.ByteaOID, `\xDEADBEEF`, `"3q2+7w=="`},
		{"bytea escape format", pgtype.ByteaOID, `abc\000`, `"abc\\000"`},
		{"bytea bad hex", pgtype.ByteaOID, `\x0g`, `"\\x0g"`},
		{"timestamptz", pgtype.TimestamptzOID, "2026-11-30 10:00:00.123456+00", `"2026-11-30T10:00:00.123456Z"`},
		{"timestamptz no fraction", pgtype.TimestamptzOID, "2026-11-30 10:00:00+00", `"2026-11-30T10:00:00.000000Z"`},
		{"timestamptz short fraction", pgtype.TimestamptzOID, "2026-11-30 10:00:00.5+00", `"2026-11-30T10:00:00.500000Z"`},
		{"timestamptz offset", pgtype.TimestamptzOID, "2026-11-30 10:00:00.25+05:30", `"2026-11-30T04:30:00.250000Z"`},
		{"timestamptz negative offset", pgtype.TimestamptzOID, "2026-12-31 23:00:00-02", `"2027-01-01T01:00:00.000000Z"`},
		{"timestamptz LMT offset", pgtype.TimestamptzOID, "1850-01-01 00:00:00+00:53:28", `"1849-12-31T23:06:32.000000Z"`},
		{"timestamptz infinity", pgtype.TimestamptzOID, "infinity", `"infinity"`},
		{"timestamptz -infinity", pgtype.TimestamptzOID, "-infinity", `"-infinity"`},
		{"timestamptz BC", pgtype.TimestamptzOID, "0044-03-15 12:00:00+00 BC", `"0044-03-15 12:00:00+00 BC"`},
		{"timestamptz 5-digit year", pgtype.TimestamptzOID, "10000-01-01 00:00:00+00", `"10000-01-01 00:00:00+00"`},
		{"timestamptz other DateStyle", pgtype.TimestamptzOID, "Mon Nov 30 10:00:00 2026 UTC", `"Mon Nov 30 10:00:00 2026 UTC"`},
		{"timestamp", pgtype.TimestampOID, "2026-11-30 10:00:00.123", `"2026-11-30T10:00:00.123000"`},
		{"timestamp with offset", pgtype.TimestampOID, "2026-11-30 10:00:00+00", `"2026-11-30 10:00:00+00"`},
		{"date", pgtype.DateOID, "2026-11-30", `"2026-11-30"`},
		{"time", pgtype.TimeOID, "10:00:00", `"10:00:00"`},
		{"timetz", pgtype.TimetzOID, "10:00:00+02", `"10:00:00+02"`},
		{"interval", pgtype.IntervalOID, "1 day 02:00:00", `"1 day 02:00:00"`},
		{"uuid", pgtype.UUIDOID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		{"text", pgtype.TextOID, "héllo \"w\"", `"héllo \"w\""`},
		{"varchar", pgtype.VarcharOID, "v", `"v"`},
		{"bpchar", pgtype.BPCharOID, "ab ", `"ab "`},
		{"name", pgtype.NameOID, "n", `"n"`},
		{"inet", pgtype.InetOID, "10.0.0.1/8", `"10.0.0.1/8"`},
		{"money", 790, "$1.00", `"$1.00"`},
		{"xml", pgtype.XMLOID, "<a>\n</a>", `"<a>\n</a>"`},
		{"enum", 16500, "happy", `"happy"`},
		{"domain over int", 16501, "5", `"5"`},
		{"range", pgtype.Int4rangeOID, "[1,5)", `"[1,5)"`},
		{"unknown builtin", pgtype.PointOID, "(1,2)", `"(1,2)"`},

		{"int4[]", pgtype.Int4ArrayOID, "{1,2,NULL,-3}", `[1,2,null,-3]`},
		{"int4[][]", pgtype.Int4ArrayOID, "{{1,2},{3,4}}", `[[1,2],[3,4]]`},
		{"int8[] empty", pgtype.Int8ArrayOID, "{}", `[]`},
		{"text[]", pgtype.TextArrayOID, `{1,"a b","x\"y",NULL,"NULL","","back\\slash","{}"}`, `["1","a b","x\"y",null,"NULL","","back\\slash","{}"]`},
		{"varchar[] null case", pgtype.VarcharArrayOID, `{null,Null}`, `[null,null]`},
		{"float8[]", pgtype.Float8ArrayOID, "{1.5,NaN,-Infinity}", `[1.5,"NaN","-Infinity"]`},
		{"numeric[]", pgtype.NumericArrayOID, "{1.10,NaN}", `["1.10","NaN"]`},
		{"bool[]", pgtype.BoolArrayOID, "{t,f,NULL}", `[true,false,null]`},
		{"jsonb[]", pgtype.JSONBArrayOID, `{"{\"a\": 1}","[1, 2]",NULL}`, `[{"a":1},[1,2],null]`},
		{"json[] number", pgtype.JSONArrayOID, `{1,"\"s\""}`, `[1,"s"]`},
		{"uuid[]", pgtype.UUIDArrayOID, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", `["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]`},
		{"timestamptz[]", pgtype.TimestamptzArrayOID, `{"2026-11-30 10:00:00+00",infinity}`, `["2026-11-30T10:00:00.000000Z","infinity"]`},
		{"timestamp[]", pgtype.TimestampArrayOID, `{"2026-11-30 10:00:00.1"}`, `["2026-11-30T10:00:00.100000"]`},
		{"date[]", pgtype.DateArrayOID, `{2026-11-30}`, `["2026-11-30"]`},
		{"bytea[]", pgtype.ByteaArrayOID, `{"\\x0a0b",NULL}`, `["Cgs=",null]`},
		{"array with bounds", pgtype.Int4ArrayOID, "[0:1]={1,2}", `"[0:1]={1,2}"`},
		{"malformed array", pgtype.Int4ArrayOID, "{1,2", `"{1,2"`},
		{"array trailing junk", pgtype.Int4ArrayOID, "{1}x", `"{1}x"`},
		{"array empty element", pgtype.Int4ArrayOID, "{1,,2}", `"{1,,2}"`},
		{"box[] unknown", pgtype.BoxArrayOID, "{(1,1),(0,0);(2,2),(1,1)}", `"{(1,1),(0,0);(2,2),(1,1)}"`},
		{"enum[]", 16502, "{a,b}", `"{a,b}"`},
		{"int4range[]", pgtype.Int4rangeArrayOID, `{"[1,2)"}`, `"{\"[1,2)\"}"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := valueJSON(tt.oid, tt.text)
			if got != tt.want {
				t.Errorf("value(%d, %q) = %s, want %s", tt.oid, tt.text, got, tt.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("value(%d, %q) = %s is not valid JSON", tt.oid, tt.text, got)
			}
		})
	}
}

func TestIsJSONNumber(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "-0": true, "10": true, "1.5": true, "1e5": true, "1E+5": true, "1.5e-5": true,
		"": false, "-": false, "01": false, "1.": false, ".5": false, "1e": false, "+1": false,
		"NaN": false, "Infinity": false, "0x10": false, "1 ": false,
	} {
		if got := isJSONNumber([]byte(s)); got != want {
			t.Errorf("isJSONNumber(%q) = %v, want %v", s, got, want)
		}
		// encoding/json tolerates surrounding whitespace; a value must not
		// have any.
		var v float64
		if valid := json.Unmarshal([]byte(s), &v) == nil && strings.TrimSpace(s) == s; valid != want {
			t.Errorf("isJSONNumber(%q) disagrees with encoding/json (%v)", s, valid)
		}
	}
}
