package capture

import "testing"

func TestCompareMembership(t *testing.T) {
	part := func(pub string, ops, via string, table int64, def string) string {
		return pubPart{pub: pub, pubOID: 10, ops: ops, via: via, table: table, def: def}.String()
	}
	base := part("p", "iudt", "rel1", 5, "d0")
	for _, c := range []struct {
		name, now, want string
	}{
		{"unchanged", base, ""},
		{"removed", "", "lost"},
		{"removed and added again", part("p", "iudt", "rel2", 5, "d0"), "lost"},
		{"filter replaced in one statement", part("p", "iudt", "rel2", 5, "d1"), "redefined"},
		{"an operation no longer published", part("p", "iut", "rel1", 5, "d0"), "lost"},
		{"more operations", part("p", "iudt", "rel1", 5, "d0"), ""},
		{"table dropped and created again", part("p", "iudt", "rel2", 6, "d1"), "lost"},
		{"also in a second publication", base + partSep + part("p_keyless", "it", "rel3", 5, "d0"), "redefined"},
		{"publication recreated", pubPart{pub: "p", pubOID: 11, ops: "iudt", via: "rel1", table: 5, def: "d0"}.String(), "lost"},
	} {
		if got := compareMembership(base, c.now); got != c.want {
			t.Errorf("%s: compareMembership = %q, want %q", c.name, got, c.want)
		}
	}
	fewer := part("p", "i", "rel1", 5, "d0")
	if got := compareMembership(fewer, part("p", "iudt", "rel1", 5, "d0")); got != "redefined" {
		t.Errorf("more operations published: %q, want redefined", got)
	}
}
