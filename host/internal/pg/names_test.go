package pg

import (
	"strings"
	"testing"
)

func TestSlotProblem(t *testing.T) {
	for name, want := range map[string]string{
		"walcast_orders":        "",
		"":                      "is empty",
		"Orders":                `contains 'O'`,
		"a-b":                   `contains '-'`,
		strings.Repeat("a", 63): "",
		strings.Repeat("a", 64): "is 64 characters long",
	} {
		got := SlotProblem(name)
		if want == "" && got != "" || want != "" && !strings.HasPrefix(got, want) {
			t.Errorf("SlotProblem(%q) = %q, want %q…", name, got, want)
		}
	}
}
