package capture

import (
	"strings"
	"testing"
)

func TestKeylessPublicationFitsIdentifierLimit(t *testing.T) {
	if got := KeylessPublication("walcast_shop"); got != "walcast_shop_keyless" {
		t.Fatalf("got %q", got)
	}
	long := "walcast_" + strings.Repeat("p", 55) // 63 bytes, the longest allowed
	got := KeylessPublication(long)
	if len(got) != 63 || !strings.HasSuffix(got, "_keyless") || !strings.HasPrefix(long, strings.TrimSuffix(got, "_keyless")) {
		t.Fatalf("KeylessPublication(%d bytes) = %q (%d bytes), want 63 bytes ending in _keyless", len(long), got, len(got))
	}
}
