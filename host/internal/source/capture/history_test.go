package capture

import (
	"strings"
	"testing"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// checkHistory decides, from what the walcast schema remembers and the
// slot as it is, whether streaming would hide lost changes.
func TestCheckHistory(t *testing.T) {
	here := Identity{SystemIdentifier: "73", DatabaseOID: 5}
	rec := Record{Identity: Identity{SystemIdentifier: "73", DatabaseOID: 5, SlotCreatedLSN: 0x100}}
	marks := map[string]cdc.EventID{"b": cdc.MustParseEventID("0/200:1"), "a": cdc.MustParseEventID("0/180:0")}
	ok := slotInfo{exists: true, plugin: "pgoutput", sameDB: true, walStatus: "reserved"}
	for _, tc := range []struct {
		name      string
		rec       Record
		known     bool
		here      Identity
		slot      slotInfo
		marks     map[string]cdc.EventID
		pubExists bool
		want      string // Kind, "" for none
	}{
		{"first start", Record{}, false, here, slotInfo{}, nil, false, ""},
		{"healthy", rec, true, here, ok, marks, true, ""},
		{"older walcast, no identity yet", Record{}, true, here, ok, marks, true, ""},
		{"slot gone with checkpoints", Record{}, true, here, slotInfo{}, marks, true, "slot lost"},
		{"slot gone, created before, no checkpoint yet", rec, true, here, slotInfo{}, nil, true, "slot lost"},
		{"another cluster", rec, true, Identity{SystemIdentifier: "99", DatabaseOID: 5}, slotInfo{}, marks, true, "foreign checkpoints"},
		{"another database", rec, true, Identity{SystemIdentifier: "73", DatabaseOID: 6}, ok, marks, true, "foreign checkpoints"},
		{"invalidated", rec, true, here, slotInfo{exists: true, walStatus: "lost"}, marks, true, "slot invalidated"},
		{"publication dropped", rec, true, here, ok, marks, false, "publication dropped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := checkHistory(Config{Slot: "s", Publication: "p"}, "shop", tc.rec, tc.known, tc.here, tc.slot, tc.marks, tc.pubExists)
			switch {
			case tc.want == "" && g != nil:
				t.Fatalf("got %s, want no refusal", g.Kind)
			case tc.want != "" && (g == nil || g.Kind != tc.want):
				t.Fatalf("got %v, want %s", g, tc.want)
			case g != nil:
				if len(tc.marks) > 0 && !strings.Contains(g.Error(), "last checkpoints: a 0/180:0, b 0/200:1.") {
					t.Errorf("refusal does not list the checkpoints in sink order: %s", g)
				}
				if !strings.Contains(g.Error(), "--accept-gap") {
					t.Errorf("refusal does not name the way out: %s", g)
				}
			}
		})
	}
}
