package rules

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// membersOf lists what the iterator yields, as "name=value" lines.
func membersOf(obj []byte) ([]string, bool) {
	var out []string
	m := newMembers(obj)
	for {
		n, v, ok := m.next()
		if !ok {
			return out, !m.bad
		}
		out = append(out, fmt.Sprintf("%s=%s", n, v))
	}
}

func eachMemberOf(obj []byte) ([]string, bool) {
	var out []string
	err := cdc.EachMember(obj, func(n, v []byte) error {
		out = append(out, fmt.Sprintf("%s=%s", n, v))
		return nil
	})
	return out, err == nil
}

// On every JSON object the iterator yields what cdc.EachMember does; on
// anything else it never panics.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, ` { "a" : 1 , "b":[1,{"c":"}"}],"d\"e":"x\\\\"}`, `{"a":"0123456789abcdef0123\"x"}`, `{"a":nul`, `[1]`, `{"a":"\\`} {
		f.Add(s)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		f.Add(genRow(rnd))
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, gotOK := membersOf([]byte(s))
		if !json.Valid([]byte(s)) || len(s) == 0 || s[0] != '{' {
			return
		}
		want, wantOK := eachMemberOf([]byte(s))
		if gotOK != wantOK || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: members %v %v, EachMember %v %v", s, got, gotOK, want, wantOK)
		}
	})
}
