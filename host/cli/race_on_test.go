//go:build race

package cli

// raceEnabled: this test binary runs with the race detector.
const raceEnabled = true
