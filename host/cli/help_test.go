package cli

import (
	"strings"
	"testing"
)

// TestHelp asks every command for its help in the three ways a user does
// and requires a real usage text on stdout with exit 0: the synopsis,
// every flag the command takes with its default, and an example whose
// flags the command accepts. Bad usage still exits 2 with the help on
// stderr.
func TestHelp(t *testing.T) {
	for _, c := range commands("") {
		t.Run(c.name, func(t *testing.T) {
			words := strings.Fields(c.name)
			var first string
			for _, args := range [][]string{
				append(append([]string{}, words...), "--help"),
				append(append([]string{}, words...), "-h"),
				append([]string{"help"}, words...),
			} {
				stdout, stderr, code := walcastCmd(t, args...)
				if code != 0 || stderr != "" {
					t.Fatalf("walcast %s: exit %d, stderr %q; want 0 and nothing on stderr", strings.Join(args, " "), code, stderr)
				}
				if first == "" {
					first = stdout
				} else if stdout != first {
					t.Errorf("walcast %s prints another help than --help:\n%s", strings.Join(args, " "), stdout)
				}
			}
			synopsis := "Usage: walcast " + strings.TrimSpace(c.name+" "+c.args)
			for _, want := range []string{synopsis, "\nExample:\n  walcast " + c.example + "\n", capitalize(c.summary)} {
				if !strings.Contains(first, want) {
					t.Errorf("help lacks %q:\n%s", want, first)
				}
			}

			// The example's flags are ones the command accepts: with
			// --help appended they parse (a flag it does not take is exit 2).
			example := strings.Fields(c.example)
			stdout, stderr, code := walcastCmd(t, append(example, "--help")...)
			if code != 0 || stdout != first {
				t.Errorf("the example %q with --help: exit %d, stderr %q", c.example, code, stderr)
			}

			// Bad usage: an unknown flag.
			stdout, stderr, code = walcastCmd(t, append(append([]string{}, words...), "--no-such-flag")...)
			if code != 2 || stdout != "" || !strings.Contains(stderr, "flag provided but not defined: -no-such-flag") || !strings.Contains(stderr, synopsis) {
				t.Errorf("unknown flag: exit %d, stdout %q, stderr %q; want 2 and the help on stderr", code, stdout, stderr)
			}
		})
	}
}

// TestHelpFlagsDefaults checks the flags part of a help against what the
// command declares: run's flags, each with its default when it has one.
func TestHelpFlagsDefaults(t *testing.T) {
	stdout, _, code := walcastCmd(t, "run", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"  --plugin-dir string\n",
		"  --log-level string\n      debug, info, warn or error (default \"info\")\n",
		"  --log-format string\n      text or json (default \"text\")\n",
		"  --shutdown-timeout duration\n",
		"  --metrics-listen string\n",
		"$WALCAST_PLUGIN_DIR",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("walcast run --help lacks %q:\n%s", want, stdout)
		}
	}
}

// TestUsage covers walcast alone, walcast help, the plugin group and
// unknown commands.
func TestUsage(t *testing.T) {
	stdout, stderr, code := walcastCmd(t, "help")
	if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "walcast streams PostgreSQL changes to sinks.") {
		t.Errorf("walcast help: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, c := range commands("") {
		if !strings.Contains(stdout, "\n  "+strings.TrimSpace(c.name+" "+c.args)+" ") {
			t.Errorf("walcast help does not list %s:\n%s", c.name, stdout)
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}} {
		if out, _, code := walcastCmd(t, args...); code != 0 || out != stdout {
			t.Errorf("walcast %s: exit %d, stdout differs from walcast help", args[0], code)
		}
	}
	if out, errOut, code := walcastCmd(t); code != 2 || out != "" || errOut != stdout {
		t.Errorf("walcast alone: exit %d, stdout %q; want 2 and the usage on stderr", code, out)
	}
	for _, args := range [][]string{{"plugin", "--help"}, {"help", "plugin"}} {
		out, errOut, code := walcastCmd(t, args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "plugin install SOURCE") || !strings.Contains(out, "WALCAST_PLUGIN_DIR once") {
			t.Errorf("walcast %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
	for _, args := range [][]string{{"frobnicate"}, {"help", "frobnicate"}} {
		out, errOut, code := walcastCmd(t, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, `unknown command "frobnicate"`) {
			t.Errorf("walcast %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
}
