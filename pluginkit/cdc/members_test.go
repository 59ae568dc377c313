package cdc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMember(t *testing.T) {
	tests := []struct {
		in, name, want string
		found          bool
	}{
		{`{"a":1,"old":null}`, "old", "null", true},
		{`{"new":{"old":{"x":1}},"old":null}`, "old", "null", true},
		{`{"s":"\"old\":{","old":[1,{"a":"}"}]}`, "old", `[1,{"a":"}"}]`, true},
		{`{"s":"\\","old":"x"}`, "old", `"x"`, true},
		{`{"s":"a\\\"b","old":1}`, "old", `1`, true},
		{` { "old" : true } `, "old", "true", true},
		{`{}`, "old", "", false},
		{`{"a":1}`, "old", "", false},
		{`[1]`, "old", "", false},
		{`{"a":"unterminated}`, "old", "", false},
		{`{"a":1 "old":2}`, "old", "", false},
		{`{"a":}`, "a", "", false},
	}
	for _, tt := range tests {
		v, found := Member([]byte(tt.in), tt.name)
		if string(v) != tt.want || found != tt.found {
			t.Errorf("Member(%s, %q) = %s, %v; want %s, %v", tt.in, tt.name, v, found, tt.want, tt.found)
		}
	}
}

// FuzzEachMember holds EachMember to encoding/json on every valid JSON
// object: the same members, in order, with values equal up to spacing.
// On anything else it must not panic.
func FuzzEachMember(f *testing.F) {
	f.Add([]byte(`{"id":"0/1A2B3C8:0","xid":7412,"key":{"id":42},"new":{"s":"a\"}b","n":[1,{"x":null}]},"old":null}`))
	f.Add([]byte(`{"s":"\\\\","t":"\\"}`))
	f.Add([]byte(` { } `))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []string
		err := EachMember(data, func(name, value []byte) error {
			got = append(got, string(name), compact(value))
			return nil
		})
		dec := json.NewDecoder(bytes.NewReader(data))
		var obj json.RawMessage
		if dec.Decode(&obj) != nil || dec.More() || len(obj) == 0 || obj[0] != '{' {
			return // not one JSON object: only "no panic" is asked
		}
		if err != nil {
			t.Fatalf("EachMember(%s): %v", data, err)
		}
		var want []string
		d := json.NewDecoder(bytes.NewReader(obj))
		d.Token()
		for d.More() {
			tok, _ := d.Token()
			var v json.RawMessage
			if err := d.Decode(&v); err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(tok)
			want = append(want, string(raw[1:len(raw)-1]), compact(v))
		}
		if len(got) != len(want) {
			t.Fatalf("EachMember(%s) = %q, encoding/json %q", data, got, want)
		}
		for i := 0; i < len(got); i += 2 {
			// Names: EachMember leaves escapes and invalid UTF-8 as
			// written, encoding/json does not; compare the plain ones.
			plain := !strings.Contains(got[i], `\`) && utf8.ValidString(got[i])
			if got[i+1] != want[i+1] || (plain && got[i] != want[i]) {
				t.Fatalf("EachMember(%s) = %q, encoding/json %q", data, got, want)
			}
		}
	})
}

func compact(v []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return "invalid:" + string(v)
	}
	return b.String()
}

func TestEachMemberStops(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	err := EachMember([]byte(`{"a":1,"b":2}`), func(name, value []byte) error { n++; return stop })
	if err != stop || n != 1 {
		t.Fatalf("EachMember = %v after %d calls, want stop after 1", err, n)
	}
}
