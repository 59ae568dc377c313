package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/walcast/walcast/pluginkit/cdc"
)

const updateEnvelope = `{"id":"0/1A2B3C8:0","commit_lsn":"0/1A2B3C8","xid":7412,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"orders","op":"update","key":{"id":42},"new":{"id":42,"status":"paid","total":"19.90","email":"a@example.com","country":"DE","qty":3},"old":{"id":42,"status":"new","total":"19.90","email":"a@example.com","country":"DE","qty":3}}`

func event(t testing.TB, payload string) cdc.Event {
	t.Helper()
	var head struct {
		ID     string `json:"id"`
		Schema string `json:"schema"`
		Table  string `json:"table"`
		Op     string `json:"op"`
	}
	if err := json.Unmarshal([]byte(payload), &head); err != nil {
		t.Fatal(err)
	}
	id, err := cdc.ParseEventID(head.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The key inside the payload, as the decoder hands it over.
	raw := []byte(payload)
	key, _ := cdc.Member(raw, "key")
	return cdc.Event{ID: id, Schema: head.Schema, Table: head.Table, Op: cdc.Op(head.Op), Key: key[:len(key):len(key)], Payload: raw}
}

func mustCompile(t testing.TB, s Spec) *Rules {
	t.Helper()
	r, probs := Compile(s)
	if len(probs) > 0 {
		t.Fatalf("Compile: %v", probs)
	}
	return r
}

func TestFilterVariables(t *testing.T) {
	ev := event(t, updateEnvelope)
	for expr, want := range map[string]bool{
		`op == "update" && table == "orders" && schema == "public"`: true,
		`new.status == "paid" && double(new.total) > 10.0`:          true,
		`double(new.total) > 100.0`:                                 false,
		`"status" in changed`:                                       true,
		`"email" in changed`:                                        false,
		`changed == ["status"]`:                                     true,
		`key.id == 42 && new.qty > 2.5 && xid == 7412`:              true,
		`id == "0/1A2B3C8:0"`:                                       true,
		`commit_time > timestamp("2026-11-30T09:00:00Z")`:           true,
		`has(new.notes)`:                                            false,
		`old.status != new.status`:                                  true,
		`size(new) == 6`:                                            true,
	} {
		r := mustCompile(t, Spec{Filter: expr})
		res, err := r.Apply(ev, nil)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		if res.Keep != want {
			t.Errorf("%s = %v, want %v", expr, res.Keep, want)
		}
		if !bytes.Equal(res.Event.Payload, ev.Payload) {
			t.Errorf("%s: a filter changed the payload", expr)
		}
	}
}

func TestFilterRuntimeErrorNamesTheExpression(t *testing.T) {
	r := mustCompile(t, Spec{Filter: `new.missing == 1`})
	_, err := r.Apply(event(t, updateEnvelope), nil)
	if err == nil || !strings.Contains(err.Error(), "filter") || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("err = %v, want the filter's missing key", err)
	}
}

func TestCompileProblemsArePlaced(t *testing.T) {
	for _, c := range []struct {
		spec             Spec
		where            string
		line, col        int
		messageSubstring string
	}{
		{Spec{Filter: `op == `}, "filter", 1, 6, "Syntax error"},
		{Spec{Filter: `op + 1 == 2`}, "filter", 1, 3, "no matching overload"},
		{Spec{Filter: `table`}, "filter", 1, 0, "needs bool"},
		{Spec{Route: `new.x == 1`}, "route", 1, 0, "needs string"},
		{Spec{Filter: "op == \"x\" &&\n  nope"}, "filter", 2, 2, "undeclared reference"},
		{Spec{Transform: Transform{Set: map[string]string{"region": `new.country ==`}}}, "set.region", 1, 14, "Syntax error"},
		{Spec{Transform: Transform{Mask: map[string]string{"email": "md5"}}}, "mask.email", 0, 0, "is not one of"},
		{Spec{Transform: Transform{Drop: []string{"a"}, Keep: []string{"b"}}}, "transform", 0, 0, "cannot both"},
	} {
		_, probs := Compile(c.spec)
		if len(probs) == 0 {
			t.Errorf("%+v: no problem", c.spec)
			continue
		}
		p := probs[0]
		if p.Where != c.where || p.Line != c.line || p.Column != c.col || !strings.Contains(p.Message, c.messageSubstring) {
			t.Errorf("%+v: got %+v, want %s at %d:%d with %q", c.spec, p, c.where, c.line, c.col, c.messageSubstring)
		}
	}
}

func TestColumnsNamed(t *testing.T) {
	r := mustCompile(t, Spec{Filter: `new.status == "paid" && "email" in changed && has(old.qty)`,
		Route: `"orders." + string(key["id"])`})
	var got []string
	for _, c := range r.Columns() {
		got = append(got, c.Where+":"+c.Var+"."+c.Name)
	}
	want := "filter:new.status filter:changed.email filter:old.qty route:key.id"
	if strings.Join(got, " ") != want {
		t.Fatalf("columns = %v, want %s", got, want)
	}
}

func TestTransformAppliesToKeyNewOldConsistently(t *testing.T) {
	r := mustCompile(t, Spec{
		Route: `"tenant-" + new.country`,
		Transform: Transform{
			Drop:   []string{"qty"},
			Mask:   map[string]string{"email": MaskSHA256, "id": MaskRedact},
			Rename: map[string]string{"status": "state"},
			Set:    map[string]string{"region": `new.country == 'DE' ? 'eu' : 'other'`},
		},
	})
	ev := event(t, updateEnvelope)
	res, err := r.Apply(ev, []byte(`{"id":41}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Event.ID != ev.ID || res.Event.Route != "tenant-DE" {
		t.Fatalf("id %v route %q", res.Event.ID, res.Event.Route)
	}
	sum := sha256.Sum256([]byte("a@example.com"))
	digest := hex.EncodeToString(sum[:])
	want := `{"id":"0/1A2B3C8:0","commit_lsn":"0/1A2B3C8","xid":7412,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"orders","op":"update",` +
		`"key":{"id":"***"},` +
		`"new":{"id":"***","state":"paid","total":"19.90","email":"` + digest + `","country":"DE","region":"eu"},` +
		`"old":{"id":"***","state":"new","total":"19.90","email":"` + digest + `","country":"DE"}}`
	if string(res.Event.Payload) != want {
		t.Fatalf("payload\n%s\nwant\n%s", res.Event.Payload, want)
	}
	if string(res.Event.Key) != `{"id":"***"}` || res.OldKey != nil {
		t.Fatalf("key %s old key %s: a redacted key is one row", res.Event.Key, res.OldKey)
	}
	if bytes.Contains(res.Event.Payload, []byte("a@example.com")) || bytes.Contains(res.Event.Payload, []byte("42")) {
		t.Fatal("a masked value is in the payload")
	}
	if !json.Valid(res.Event.Payload) {
		t.Fatal("payload is not JSON")
	}
}

func TestKeepLeavesTheKeyAndUnchanged(t *testing.T) {
	r := mustCompile(t, Spec{Transform: Transform{Keep: []string{"status", "notes"}, Rename: map[string]string{"notes": "memo"}}})
	payload := `{"id":"0/A:1","commit_lsn":"0/A","xid":1,"commit_time":"2026-11-30T10:00:00Z","schema":"public","table":"t","op":"update","key":{"id":1},"new":{"id":1,"status":"x","n":2},"old":null,"unchanged":["notes","blob"]}`
	res, err := r.Apply(event(t, payload), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"0/A:1","commit_lsn":"0/A","xid":1,"commit_time":"2026-11-30T10:00:00Z","schema":"public","table":"t","op":"update","key":{"id":1},"new":{"status":"x"},"old":null,"unchanged":["memo"]}`
	if string(res.Event.Payload) != want {
		t.Fatalf("payload\n%s\nwant\n%s", res.Event.Payload, want)
	}
}

// A computed column is added to new only: a delete, whose new is null,
// does not evaluate it (new.country would fail on it).
func TestSetSkipsEventsWithoutANewRow(t *testing.T) {
	r := mustCompile(t, Spec{Transform: Transform{Set: map[string]string{"region": `new.country == 'DE' ? 'eu' : 'other'`}}})
	del := `{"id":"0/A:0","commit_lsn":"0/A","xid":1,"commit_time":"2026-11-30T10:00:00Z","schema":"public","table":"t","op":"delete","key":{"id":1},"new":null,"old":{"id":1}}`
	res, err := r.Apply(event(t, del), nil)
	if err != nil || string(res.Event.Payload) != del {
		t.Fatalf("delete: %s, %v", res.Event.Payload, err)
	}
}

func TestDeleteAndTruncateRowsAreEmptyMaps(t *testing.T) {
	r := mustCompile(t, Spec{Filter: `has(new.status) || op == "truncate"`})
	trunc := `{"id":"0/A:0","commit_lsn":"0/A","xid":1,"commit_time":"2026-11-30T10:00:00Z","schema":"public","table":"t","op":"truncate","key":null,"new":null,"old":null,"cascade":false,"restart_identity":false}`
	res, err := r.Apply(event(t, trunc), nil)
	if err != nil || !res.Keep {
		t.Fatalf("truncate: %+v %v", res, err)
	}
}
