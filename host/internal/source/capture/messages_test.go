package capture

import "testing"

// TestSupportsMessages: backfill chunks travel as logical decoding
// messages, which pgoutput streams from PostgreSQL 14 on.
func TestSupportsMessages(t *testing.T) {
	for v, want := range map[string]bool{
		"15.4": true, "14.0": true, "17beta1": true, "13.12": false, "9.6.24": false, "10.1 (Debian)": false, "": false,
	} {
		if got := SupportsMessages(v); got != want {
			t.Errorf("SupportsMessages(%q) = %v, want %v", v, got, want)
		}
	}
}
