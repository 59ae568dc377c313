// Package cli is the walcast command line: flags, subcommands and what they
// print. cmd/walcast is a thin main around Main; the engine it drives lives
// in host/internal, which only packages under host can import.
package cli

import (
	"fmt"
	"io"
)

// Main runs the walcast command with args (the program name left out) and
// returns the process exit code. buildVersion is what `walcast version`
// prints; "" falls back to the module's build information.
func Main(buildVersion string, args []string, stdout, stderr io.Writer) int {
	return run(args, stdout, stderr, buildVersion)
}

const usage = `walcast streams PostgreSQL changes to sinks.

Usage:
  walcast run PIPELINE.hcl [--plugin-dir DIR] [--metrics-listen ADDR]
                                                    run the pipeline until SIGINT/SIGTERM
  walcast validate PIPELINE.hcl [--plugin-dir DIR]  check a pipeline file and its sinks' config
  walcast status PIPELINE.hcl                       slot, checkpoints, parked events and usage
  walcast parked PIPELINE.hcl [--sink ID]           list parked events with their last error
  walcast replay PIPELINE.hcl --sink ID --all|--id EVENT_ID
                                                    deliver parked events again, in order per row
  walcast backfill PIPELINE.hcl --table SCHEMA.TABLE... [--sink ID...] [--wait] [--cancel]
                                                    stream a table's existing rows as read events
  walcast pause PIPELINE.hcl [--sink ID]            stop delivering (to one sink); events wait in the slot
  walcast resume PIPELINE.hcl [--sink ID]           deliver again after walcast pause
  walcast console PIPELINE.hcl... [--listen 127.0.0.1:8080] [--token TOKEN]
                                                    web console: slots, sinks, usage, lag, parked
                                                    events; replay, pause and resume buttons
  walcast teardown PIPELINE.hcl --yes [--force]     drop the slot, publication and checkpoints
  walcast plugin install SOURCE [--plugin-dir DIR] [--name TYPE]
                                                    install a sink plugin (binary, Go package
                                                    directory or module@version) and lock its SHA-256
  walcast plugin list [--plugin-dir DIR]            installed plugins, versions and checksum status
  walcast plugin remove TYPE [--plugin-dir DIR]     delete an installed plugin and its lock entry
  walcast version                                   print the version

Plugins are looked up in --plugin-dir, then $WALCAST_PLUGIN_DIR, then the
directory of the walcast executable.
`

// run dispatches a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer, buildVersion string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(rest, stdout, stderr)
	case "validate":
		return cmdValidate(rest, stdout, stderr)
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "parked":
		return cmdParked(rest, stdout, stderr)
	case "replay":
		return cmdReplay(rest, stdout, stderr)
	case "backfill":
		return cmdBackfill(rest, stdout, stderr)
	case "pause":
		return cmdPause(rest, stdout, stderr)
	case "resume":
		return cmdResume(rest, stdout, stderr)
	case "console":
		return cmdConsole(rest, stdout, stderr)
	case "teardown":
		return cmdTeardown(rest, stdout, stderr)
	case "plugin":
		return cmdPlugin(rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "walcast", version(buildVersion))
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "walcast: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}
