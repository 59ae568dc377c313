package epochs

import (
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

func id(lsn uint64) pluginkit.EventID { return pluginkit.EventID{CommitLSN: lsn} }

func TestAfter(t *testing.T) {
	a := Checkpoint{ID: id(0x400), Epoch: "A"}
	for _, c := range []struct {
		name   string
		cp     Checkpoint
		last   pluginkit.EventID
		epoch  string
		replay bool
		want   Checkpoint
	}{
		{"same epoch, higher", a, id(0x500), "A", false, Checkpoint{id(0x500), "A"}},
		{"same epoch, lower: never back", a, id(0x100), "A", false, a},
		{"new epoch, lower: moves down", a, id(0x100), "B", false, Checkpoint{id(0x100), "B"}},
		{"older host: keeps the epoch", a, id(0x500), "", false, Checkpoint{id(0x500), "A"}},
		{"none stored: adopts the epoch", Checkpoint{ID: id(0x400)}, id(0x300), "A", false, Checkpoint{id(0x400), "A"}},
		{"replay of a higher id: moves nothing", Checkpoint{id(0x100), "B"}, id(0x380), "B", true, Checkpoint{id(0x100), "B"}},
		{"replay without epoch: moves nothing", Checkpoint{id(0x100), "B"}, id(0x380), "", true, Checkpoint{id(0x100), "B"}},
	} {
		if got := c.cp.After(c.last, c.epoch, c.replay); got != c.want {
			t.Errorf("%s: %+v.After(%s, %q, %v) = %+v, want %+v", c.name, c.cp, c.last, c.epoch, c.replay, got, c.want)
		}
	}
}

func TestCovers(t *testing.T) {
	a := Checkpoint{ID: id(0x400), Epoch: "A"}
	if !a.Covers(id(0x400), "A") || !a.Covers(id(0x100), "") || a.Covers(id(0x401), "A") || a.Covers(id(0x100), "B") {
		t.Error("Covers: at or below within the epoch (an empty one matching), never across epochs")
	}
}
