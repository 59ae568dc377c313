package cli

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// Checks of Parquet objects as hyparquet read them against the JSON
// envelopes of the same events (TestS3ParquetMatchesJSON).

// checkParquetSchema checks the envelope columns' types: docs/sinks.md's
// table of the Parquet schema.
func checkParquetSchema(t testing.TB, f parquetFile) {
	t.Helper()
	want := map[string]string{
		"id": "BYTE_ARRAY STRING REQUIRED", "commit_lsn": "BYTE_ARRAY STRING REQUIRED",
		"schema": "BYTE_ARRAY STRING REQUIRED", "table": "BYTE_ARRAY STRING REQUIRED", "op": "BYTE_ARRAY STRING REQUIRED",
		"xid": "INT64 INTEGER REQUIRED", "commit_time": "INT64 TIMESTAMP REQUIRED",
		"cascade": "BOOLEAN - OPTIONAL", "restart_identity": "BOOLEAN - OPTIONAL", "unchanged": "BYTE_ARRAY JSON OPTIONAL",
		"columns": "BYTE_ARRAY JSON OPTIONAL", "replica_identity": "BYTE_ARRAY STRING OPTIONAL",
		"before": "BYTE_ARRAY JSON OPTIONAL", "changes": "BYTE_ARRAY JSON OPTIONAL",
	}
	for _, c := range f.Schema {
		w, ok := want[c.Name]
		if !ok {
			continue
		}
		got := str(c.Type) + " " + str(c.Logical) + " " + c.Repetition
		if got != w {
			t.Errorf("%s: column %s is %s, want %s", f.Path, c.Name, got, w)
		}
		if c.Name == "commit_time" && (c.UTC == nil || !*c.UTC || !strings.Contains(strings.ToUpper(toJSON(c.Unit)), "MICROS")) {
			t.Errorf("%s: commit_time unit %v, utc %v: want microseconds, adjusted to UTC", f.Path, toJSON(c.Unit), c.UTC)
		}
	}
}

func str(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// compareParquetRow checks one row against the JSON envelope of its event
// and returns the event's id.
func compareParquetRow(t testing.TB, row map[string]json.RawMessage, byID map[pluginkit.EventID]s3Stored) pluginkit.EventID {
	t.Helper()
	var idText string
	json.Unmarshal(row["id"], &idText)
	id, err := pluginkit.ParseEventID(idText)
	if err != nil {
		t.Fatalf("row id %s: %v", row["id"], err)
	}
	ev, ok := byID[id]
	if !ok {
		t.Fatalf("Parquet row %s is no event the JSON sink stored", id)
	}
	var env map[string]json.RawMessage
	json.Unmarshal(ev.Raw, &env)
	for _, name := range []string{"id", "commit_lsn", "schema", "table", "op"} {
		if !bytes.Equal(row[name], env[name]) {
			t.Errorf("event %s: %s is %s in Parquet, %s in JSON", id, name, row[name], env[name])
		}
	}
	if got := int64Of(t, row["xid"]); strconv.FormatInt(got, 10) != string(env["xid"]) {
		t.Errorf("event %s: xid %d in Parquet, %s in JSON", id, got, env["xid"])
	}
	var ts string
	json.Unmarshal(env["commit_time"], &ts)
	ct, _ := time.Parse(time.RFC3339Nano, ts)
	var micros struct{ Micros string }
	json.Unmarshal(row["commit_time"], &micros)
	if micros.Micros != strconv.FormatInt(ct.UnixMicro(), 10) {
		t.Errorf("event %s: commit_time %s µs in Parquet, %s in JSON", id, micros.Micros, ts)
	}
	for _, name := range []string{"cascade", "restart_identity"} {
		if got, want := nullable(row[name]), nullable(env[name]); got != want {
			t.Errorf("event %s: %s is %s in Parquet, %s in JSON", id, name, got, want)
		}
	}
	for _, g := range []string{"key", "new", "old"} {
		compareGroup(t, id, g, row[g], env[g])
	}
	return id
}

func nullable(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	return string(raw)
}

// compareGroup checks a row group (key, new, old) column by column: a
// JSON integer is an INT64, another number a DOUBLE, a string a STRING,
// a boolean a BOOLEAN, objects, arrays and mixed columns JSON text.
func compareGroup(t testing.TB, id pluginkit.EventID, g string, pq, js json.RawMessage) {
	t.Helper()
	var cols map[string]json.RawMessage
	json.Unmarshal(pq, &cols)
	var want map[string]json.RawMessage
	json.Unmarshal(js, &want)
	if want == nil {
		for c, v := range cols {
			if nullable(v) != "null" {
				t.Errorf("event %s: %s is null in JSON, Parquet has %s = %s", id, g, c, v)
			}
		}
		return
	}
	for c, w := range want {
		got := cols[c]
		if !sameValue(t, got, w) {
			t.Errorf("event %s: %s.%s is %s in Parquet, %s in JSON", id, g, c, nullable(got), w)
		}
	}
	for c, v := range cols {
		if _, ok := want[c]; !ok && nullable(v) != "null" {
			t.Errorf("event %s: %s.%s = %s in Parquet is not in the JSON envelope", id, g, c, v)
		}
	}
}

// sameValue reports whether a Parquet value (as the test's hyparquet
// script prints it) is the JSON value js.
func sameValue(t testing.TB, pq, js json.RawMessage) bool {
	t.Helper()
	if nullable(pq) == "null" || nullable(js) == "null" {
		return nullable(pq) == nullable(js)
	}
	var tagged struct {
		Int64 *string `json:"int64"`
		JSON  *string `json:"json"`
	}
	if pq[0] == '{' && json.Unmarshal(pq, &tagged) == nil && (tagged.Int64 != nil || tagged.JSON != nil) {
		if tagged.Int64 != nil {
			return *tagged.Int64 == string(js)
		}
		return sameJSON(t, []byte(*tagged.JSON), js)
	}
	switch js[0] {
	case '"', 't', 'f':
		return bytes.Equal(pq, js) || sameJSON(t, pq, js)
	case '{', '[':
		return false // must come as JSON text
	}
	// A DOUBLE: the same float64.
	a, err1 := strconv.ParseFloat(string(pq), 64)
	b, err2 := strconv.ParseFloat(string(js), 64)
	return err1 == nil && err2 == nil && a == b
}

func sameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// int64Of reads an INT64 as the hyparquet script prints it.
func int64Of(t testing.TB, raw json.RawMessage) int64 {
	t.Helper()
	var v struct{ Int64 string }
	if err := json.Unmarshal(raw, &v); err != nil || v.Int64 == "" {
		t.Fatalf("%s is not an INT64 as hyparquet reads it", raw)
	}
	n, err := strconv.ParseInt(v.Int64, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
