package capture

import (
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
