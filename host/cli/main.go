// Package cli is the walcast command line: flags, subcommands and what they
// print. cmd/walcast is a thin main around Main; the engine it drives lives
// in host/internal, which only packages under host can import.
package cli

import "io"

// Main runs the walcast command with args (the program name left out) and
// returns the process exit code. buildVersion is what `walcast version`
// prints; "" falls back to the module's build information.
func Main(buildVersion string, args []string, stdout, stderr io.Writer) int {
	return dispatch(args, stdout, stderr, buildVersion)
}
