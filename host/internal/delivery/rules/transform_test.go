package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// The transform's fast walk (scan.go, the start at the key, the
// comparison of names, the untouched payload) against a reference that
// decodes the envelope with encoding/json and applies the same rules to
// the decoded rows: over generated rows and transforms, the payload
// Apply returns decodes to the reference's, with the key inside it,
// whether or not the event's key lies in its payload.
func TestTransformAgreesWithDecodedReference(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 3))
	cols := []string{"id", "n", "s", "email", `q"x`, "memo"}
	for range 400 {
		tr := Transform{Mask: map[string]string{}, Rename: map[string]string{}}
		for _, c := range cols {
			switch rnd.IntN(6) {
			case 0:
				tr.Drop = append(tr.Drop, c)
			case 1:
				tr.Mask[c] = []string{MaskSHA256, MaskRedact}[rnd.IntN(2)]
			case 2:
				tr.Rename[c] = c + "_2"
			}
		}
		if rnd.IntN(3) == 0 {
			tr.Keep, tr.Drop = slices.Clone(cols[:rnd.IntN(len(cols))]), nil
		}
		r, probs := Compile(Spec{Transform: tr})
		if len(probs) > 0 {
			t.Fatalf("%+v: %v", tr, probs)
		}
		for range 10 {
			ev := genEvent(t, rnd)
			row := func() string {
				var parts []string
				for _, c := range cols {
					if rnd.IntN(4) > 0 {
						parts = append(parts, strconv.Quote(c)+":"+genValue(rnd))
					}
				}
				return "{" + strings.Join(parts, ",") + "}"
			}
			var unchanged []string
			for _, c := range cols {
				if rnd.IntN(5) == 0 {
					unchanged = append(unchanged, strconv.Quote(c))
				}
			}
			payload := fmt.Sprintf(`{"id":"0/A:1","commit_lsn":"0/A","xid":1,"commit_time":"2026-11-30T10:00:00Z","schema":"public","table":"t","op":"update","key":%s,"new":%s,"old":%s,"unchanged":[%s]}`,
				row(), row(), []string{"null", row()}[rnd.IntN(2)], strings.Join(unchanged, ","))
			ev = event(t, payload)
			if rnd.IntN(2) == 0 {
				ev.Key = bytes.Clone(ev.Key)
			}
			res, err := r.Apply(ev, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := referenceTransform(t, tr, payload)
			if !json.Valid(res.Event.Payload) {
				t.Fatalf("%+v on %s: %s is not JSON", tr, payload, res.Event.Payload)
			}
			got := decode(t, string(res.Event.Payload))
			if g, w := canon(t, got), canon(t, want); g != w {
				t.Fatalf("%+v on\n%s:\ngot  %s\nwant %s", tr, payload, g, w)
			}
			if k, _ := cdc.Member(res.Event.Payload, "key"); !bytes.Equal(k, res.Event.Key) {
				t.Fatalf("key %s, in the payload %s", res.Event.Key, k)
			}
			if canon(t, got) == canon(t, decode(t, payload)) && !bytes.Equal(res.Event.Payload, ev.Payload) {
				t.Fatalf("%+v on %s changed nothing but wrote the payload again", tr, payload)
			}
		}
	}
}

func decode(t *testing.T, s string) map[string]any {
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber() // numbers as written: sha256 digests their text
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func canon(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// referenceTransform applies tr to the decoded envelope as
// docs/filters.md says: drop or keep, mask, rename, on key, new, old and
// the unchanged list (keep leaves the key alone).
func referenceTransform(t *testing.T, tr Transform, payload string) map[string]any {
	env := decode(t, payload)
	kept := func(c string, isKey bool) bool {
		if slices.Contains(tr.Drop, c) {
			return false
		}
		return isKey || len(tr.Keep) == 0 || slices.Contains(tr.Keep, c)
	}
	for _, part := range []string{"key", "new", "old"} {
		row, ok := env[part].(map[string]any)
		if !ok {
			continue
		}
		out := map[string]any{}
		for c, v := range row {
			if !kept(c, part == "key") {
				continue
			}
			if v != nil {
				switch tr.Mask[c] {
				case MaskSHA256:
					text, isStr := v.(string)
					if !isStr {
						b, _ := json.Marshal(v) // a json.Number as written
						text = string(b)
					}
					sum := sha256.Sum256([]byte(text))
					v = hex.EncodeToString(sum[:])
				case MaskRedact:
					v = Redacted
				}
			}
			if to, ok := tr.Rename[c]; ok {
				c = to
			}
			out[c] = v
		}
		env[part] = out
	}
	if names, ok := env["unchanged"].([]any); ok {
		out := []any{}
		for _, n := range names {
			c := n.(string)
			if !kept(c, false) {
				continue
			}
			if to, ok := tr.Rename[c]; ok {
				c = to
			}
			out = append(out, c)
		}
		env["unchanged"] = out
	}
	return env
}
