package pgtest

import (
	"os"
	"strconv"
	"testing"
)

// Chaos scales a fault test's rounds (kills, takeovers, random sequences,
// rounds of a fault): n by default, n times WALCAST_CHAOS when it is set,
// which is how `make chaos` runs the fault-injection tests longer than CI
// can. A value that is not a whole number of at least 1 fails the test.
func Chaos(tb testing.TB, n int) int {
	tb.Helper()
	v := os.Getenv("WALCAST_CHAOS")
	if v == "" {
		return n
	}
	f, err := strconv.Atoi(v)
	if err != nil || f < 1 {
		tb.Fatalf("WALCAST_CHAOS=%q: want a whole number of at least 1", v)
	}
	return n * f
}
