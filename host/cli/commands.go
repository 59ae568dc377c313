package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/walcast/walcast/host/internal/plugin/sinkclient"
)

// command is one walcast subcommand. Its words (synopsis, summary,
// details, example) are here; its flags are declared by its run function
// on the flag set newFlags returns, and its help prints them from that
// set, so the help cannot list a flag the command does not take.
type command struct {
	name    string // "run", or "plugin install" for a command of a group
	args    string // positional arguments in the synopsis: "PIPELINE.hcl"
	summary string // one line, for the command list
	details string // what it does, beyond the summary; may be empty
	example string // one command line, without the leading "walcast "
	run     func(args []string, stdout, stderr io.Writer) int
}

// pluginDirNote is repeated in the help of every command with --plugin-dir.
var pluginDirNote = `Plugins are looked up in --plugin-dir, then $` + sinkclient.EnvPluginDir + `, then the
directory of the walcast executable. Set ` + sinkclient.EnvPluginDir + ` once (for example in
your shell profile or the service unit) instead of repeating --plugin-dir.`

// commands is the list of subcommands, in the order the usage lists them.
// It is a function, not a variable, because the run functions look their
// own entry up (through newFlags) and a variable would refer to itself.
func commands(buildVersion string) []command {
	return append(append(append(append(pipelineCommands(), pluginCommands()...), libraryCommands()...), importCommands()...), versionCommand(buildVersion))
}

// pipelineCommands act on pipeline files.
func pipelineCommands() []command {
	return []command{
		{name: "run", args: "PIPELINE.hcl|DIR...", summary: "run the pipelines until SIGINT/SIGTERM",
			details: "Streams each pipeline's changes to its sinks. On SIGINT or SIGTERM it stops reading,\n" +
				"waits (up to --shutdown-timeout) for deliveries in flight, saves checkpoints and exits 0.\n" +
				"Takes several pipeline files, or directories (every *.hcl in them). Each pipeline is led\n" +
				"by one walcast at a time; the others stand by and take over when it stops. Instances\n" +
				"started with the same set share the pipelines evenly (at most --max-pipelines each).\n" +
				"A pipeline that fails stops alone; walcast exits 1 once none is left running.\n\n" + pluginDirNote,
			example: "run pipeline.hcl --metrics-listen 127.0.0.1:9187",
			run:     cmdRun},
		{name: "validate", args: "PIPELINE.hcl|DIR...", summary: "check pipeline files and their sinks' config; --source: plan a run",
			details: "Reports every problem with its file, line and column; the sinks' plugins check\n" +
				"their config blocks. A directory stands for every *.hcl in it, as for walcast run.\n" +
				"Exits 1 when a file is not valid. Without --source nothing is contacted.\n\n" +
				"--source also connects to each pipeline's source database in a read-only session,\n" +
				"creates nothing, and prints what walcast run would do there (server, role, tables,\n" +
				"schema, publications, slot, sinks, Kafka topics) and every reason it would refuse;\n" +
				"it then exits 0 only when walcast run would start.\n\n" + pluginDirNote,
			example: "validate pipeline.hcl --source",
			run:     cmdValidate},
		{name: "status", args: "PIPELINE.hcl", summary: "slot, checkpoints, parked events and usage",
			details: "Reads only the source database, so it works from any machine while the daemon runs.",
			example: "status pipeline.hcl",
			run:     cmdStatus},
		{name: "parked", args: "PIPELINE.hcl", summary: "list parked events with their last error",
			example: "parked pipeline.hcl --sink billing",
			run:     cmdParked},
		{name: "replay", args: "PIPELINE.hcl", summary: "deliver parked events again, in order per row",
			details: "Needs --sink and exactly one of --all or --id. A running walcast run delivers them;\n" +
				"with none running, replay starts the sink's plugin itself.",
			example: "replay pipeline.hcl --sink billing --all",
			run:     cmdReplay},
		{name: "backfill", args: "PIPELINE.hcl", summary: "stream tables' existing rows as read events",
			details: "Needs at least one --table SCHEMA.TABLE; --sink limits it to some sinks (repeatable).\n" +
				"A running walcast run does the work; without one the request waits for the next run.\n" +
				"--wait shows progress until done; --cancel cancels.",
			example: "backfill pipeline.hcl --table public.orders --sink search --wait",
			run:     cmdBackfill},
		{name: "resync", args: "PIPELINE.hcl", summary: "re-read tables between resync_begin and resync_end events, to heal a gap",
			details: "Re-reads every table of the pipeline (or each --table) through the backfill path; each\n" +
				"table's read events come between a resync_begin and a resync_end event. A consumer that\n" +
				"removes at resync_end every row it has not seen since resync_begin ends equal to the\n" +
				"source. --sink limits it to some sinks; --wait and --cancel as for backfill.",
			example: "resync pipeline.hcl --sink search --wait",
			run:     cmdResync},
		{name: "pause", args: "PIPELINE.hcl", summary: "stop delivering (to one sink); events wait in the slot",
			example: "pause pipeline.hcl --sink billing",
			run:     cmdPause},
		{name: "resume", args: "PIPELINE.hcl", summary: "deliver again after walcast pause",
			example: "resume pipeline.hcl --sink billing",
			run:     cmdResume},
		{name: "console", args: "PIPELINE.hcl...", summary: "web console: slots, sinks, usage, lag, parked events",
			details: "Serves a page with each pipeline's slot, sinks, hourly usage and parked events, with\n" +
				"replay, pause and resume buttons, until SIGINT/SIGTERM. Listening beyond loopback\n" +
				"requires a token.",
			example: "console pipeline.hcl --listen 127.0.0.1:8080",
			run:     cmdConsole},
		{name: "teardown", args: "PIPELINE.hcl", summary: "drop the slot, publication and checkpoints",
			details: "Without --yes it only says what it would drop. Undelivered changes are lost.",
			example: "teardown pipeline.hcl --yes",
			run:     cmdTeardown},
	}
}

// pluginCommands are the plugin group: install, list, remove, new, test.
func pluginCommands() []command {
	return []command{
		{name: "plugin install", args: "SOURCE", summary: "install a sink plugin and lock its SHA-256",
			details: "SOURCE is an executable, a directory holding a Go main package, or module/path@version\n" +
				"(both built with the local go command). The plugin is copied into the first plugin\n" +
				"directory (created if missing) and its checksum recorded in walcast-plugins.lock.\n\n" + pluginDirNote,
			example: "plugin install ./examples/customsink --plugin-dir /opt/walcast/plugins",
			run:     cmdPluginInstall},
		{name: "plugin list", summary: "installed plugins, versions and checksum state",
			details: "VERSION is the one recorded at install (for a plugin not installed with walcast plugin\n" +
				"install, the one in its build information). CHECKSUM is ok (matches the lock file),\n" +
				"MISMATCH (changed since install: walcast refuses to run it and list exits 1), unlocked\n" +
				"(not installed with walcast plugin install: runs unverified) or missing (locked, but\n" +
				"the executable is gone).\n\n" + pluginDirNote,
			example: "plugin list --plugin-dir /opt/walcast/plugins",
			run:     cmdPluginList},
		{name: "plugin remove", args: "TYPE", summary: "delete an installed plugin and its lock entry",
			details: pluginDirNote,
			example: "plugin remove batchfiles --plugin-dir /opt/walcast/plugins",
			run:     cmdPluginRemove},
		{name: "plugin new", args: "NAME [DIR]", summary: "write a sink plugin skeleton that builds and passes its tests",
			details: "Writes a Go module into DIR (default ./walcast-sink-NAME): go.mod, main.go calling\n" +
				"pluginkit.Serve, a sink with a config schema, and a test running pluginkit/sinktest's\n" +
				"conformance suite; then runs go mod tidy. Until pluginkit has a release, pass\n" +
				"--walcast-src with a checkout of github.com/walcast/walcast (docs/writing-a-sink.md).",
			example: "plugin new archive --walcast-src ~/src/walcast",
			run:     cmdPluginNew},
		{name: "plugin test", args: "PATH", summary: "run the sink conformance suite against a plugin binary",
			details: "Launches the executable at PATH as walcast run does (go-plugin handshake, gRPC, any\n" +
				"language) and runs pluginkit/sinktest's checks against it: describe, configure with\n" +
				"--config and with each required attribute left out, deliver batches (also concurrently\n" +
				"and with an ended context), close. Exits 1 when a check fails.",
			example: "plugin test ./walcast-sink-batchfiles --config '{\"dir\":\"/tmp/archive\"}'",
			run:     cmdPluginTest},
	}
}

func versionCommand(buildVersion string) command {
	return command{name: "version", summary: "print the version",
		example: "version",
		run: func(args []string, stdout, stderr io.Writer) int {
			fs := newFlags("version", stderr)
			if _, code, ok := parsePositionals(fs, args, stdout, stderr); !ok {
				return code
			}
			fmt.Fprintln(stdout, "walcast", version(buildVersion))
			return 0
		}}
}

// lookup finds the command named name ("plugin install").
func lookup(name string) (command, bool) {
	for _, c := range commands("") {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// newFlags returns the flag set of the command named name. Parse errors
// go to stderr; parseArgs and parsePositionals print the help.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed by parsePositionals, to stdout or stderr
	return fs
}

// printHelp writes the help of the command fs belongs to: synopsis,
// details, flags with their defaults, and an example.
func printHelp(w io.Writer, fs *flag.FlagSet) {
	c, ok := lookup(fs.Name())
	if !ok {
		// Every flag set is made by newFlags for a listed command; a
		// test checks that each one has its help.
		fmt.Fprintf(w, "Usage: walcast %s [flags]\n", fs.Name())
		return
	}
	synopsis := "walcast " + c.name
	if c.args != "" {
		synopsis += " " + c.args
	}
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		synopsis += " [flags]"
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s.\n", synopsis, capitalize(c.summary))
	if c.details != "" {
		fmt.Fprintf(w, "\n%s\n", c.details)
	}
	if hasFlags {
		fmt.Fprint(w, "\nFlags:\n")
		fs.VisitAll(func(f *flag.Flag) {
			kind, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if kind != "" {
				line += " " + kind
			}
			if !isZeroDefault(f) {
				if kind == "string" {
					usage += fmt.Sprintf(" (default %q)", f.DefValue)
				} else {
					usage += fmt.Sprintf(" (default %s)", f.DefValue)
				}
			}
			fmt.Fprintf(w, "%s\n      %s\n", line, strings.ReplaceAll(usage, "\n", "\n      "))
		})
	}
	fmt.Fprintf(w, "\nExample:\n  walcast %s\n", c.example)
}

// isZeroDefault reports whether f's default is its type's zero value,
// which the help leaves unsaid, as the flag package does.
func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return true
	}
	return false
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// usage is what `walcast` alone and `walcast help` print.
func usage() string {
	var b strings.Builder
	b.WriteString("walcast streams PostgreSQL changes to sinks.\n\nUsage: walcast COMMAND [ARGUMENTS] [flags]\n\nCommands:\n")
	width := 0
	for _, c := range commands("") {
		width = max(width, len(c.name)+1+len(c.args))
	}
	for _, c := range commands("") {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	b.WriteString("\nRun `walcast help COMMAND` or `walcast COMMAND --help` for its flags and an example.\n\n")
	b.WriteString(pluginDirNote + "\n")
	return b.String()
}

// groupUsage is what `walcast plugin` alone and `walcast plugin --help`
// print: the group's commands.
func groupUsage(group string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: walcast %s COMMAND [ARGUMENTS] [flags]\n\nCommands:\n", group)
	var cs []command
	width := 0
	for _, c := range commands("") {
		if strings.HasPrefix(c.name, group+" ") {
			cs = append(cs, c)
			width = max(width, len(c.name)+1+len(c.args))
		}
	}
	for _, c := range cs {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	fmt.Fprintf(&b, "\nRun `walcast help %s COMMAND` for its flags and an example.\n\n%s\n", group, pluginDirNote)
	return b.String()
}

// isGroup reports whether name is a group of commands ("plugin").
func isGroup(name string) bool {
	for _, c := range commands("") {
		if strings.HasPrefix(c.name, name+" ") {
			return true
		}
	}
	return false
}

// isHelpFlag reports whether arg asks for help the way the flag package
// understands it.
func isHelpFlag(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}

// dispatch runs the command args name, and `walcast help ...`.
func dispatch(args []string, stdout, stderr io.Writer, buildVersion string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch {
	case args[0] == "help":
		if len(args) == 1 {
			fmt.Fprint(stdout, usage())
			return 0
		}
		// walcast help plugin install == walcast plugin install --help
		return dispatch(append(args[1:len(args):len(args)], "--help"), stdout, stderr, buildVersion)
	case isHelpFlag(args[0]):
		fmt.Fprint(stdout, usage())
		return 0
	case args[0] == "--version" || args[0] == "-version":
		args = []string{"version"}
	}
	name, rest := args[0], args[1:]
	if isGroup(name) {
		switch {
		case len(rest) == 0:
			fmt.Fprint(stderr, groupUsage(name))
			return 2
		case isHelpFlag(rest[0]):
			fmt.Fprint(stdout, groupUsage(name))
			return 0
		}
		if _, ok := lookup(name + " " + rest[0]); !ok {
			fmt.Fprintf(stderr, "walcast %s: unknown command %q\n\n%s", name, rest[0], groupUsage(name))
			return 2
		}
		name, rest = name+" "+rest[0], rest[1:]
	}
	for _, c := range commands(buildVersion) {
		if c.name == name {
			return c.run(rest, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "walcast: unknown command %q\n\n%s", name, usage())
	return 2
}
