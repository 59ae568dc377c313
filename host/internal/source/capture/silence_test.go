package capture

import (
	"errors"
	"testing"
	"time"
)

// TestParseGUCDuration reads wal_sender_timeout the way SHOW prints it.
func TestParseGUCDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"60s": time.Minute, "1min": time.Minute, "500ms": 500 * time.Millisecond, "0": 0,
		"5000": 5 * time.Second, "2h": 2 * time.Hour, "1d": 24 * time.Hour, " 5s ": 5 * time.Second, "-1": 0,
	} {
		got, err := parseGUCDuration(in)
		if err != nil || got != want {
			t.Errorf("parseGUCDuration(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "s", "5 fortnights", "abc"} {
		if got, err := parseGUCDuration(in); err == nil {
			t.Errorf("parseGUCDuration(%q) = %s, want an error", in, got)
		}
	}
}

// TestSilentStreakStretchesTimeout: each stream in a row that went
// silent midway doubles the next one's receive timeout, up to maxStretch
// times the setting; any other end of a stream (a silence after a whole
// transaction, an error) starts again from the setting.
func TestSilentStreakStretchesTimeout(t *testing.T) {
	c := New(Config{Slot: "s"}, nil)
	base := 10 * time.Second
	midway := receiveTimeoutError{Slot: "s", Timeout: base, Midway: true}
	for i, want := range []time.Duration{base, 2 * base, 4 * base, 8 * base, 8 * base} {
		if got := c.stretchedTimeout(base); got != want {
			t.Fatalf("after %d midway silences: timeout %s, want %s", i, got, want)
		}
		c.noteStreamEnd(midway)
	}
	c.noteStreamEnd(receiveTimeoutError{Slot: "s", Timeout: base})
	if got := c.stretchedTimeout(base); got != base {
		t.Fatalf("after a silence between transactions: timeout %s, want %s", got, base)
	}
	c.noteStreamEnd(midway)
	c.noteStreamEnd(errors.New("connection reset"))
	if got := c.stretchedTimeout(base); got != base {
		t.Fatalf("after a stream that failed otherwise: timeout %s, want %s", got, base)
	}
}
