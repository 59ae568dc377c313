package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// parseArgs parses flags that may come before or after the one positional
// PIPELINE.hcl argument (the standard flag package stops at the first
// positional one). When ok is false the caller exits with code: 0 after
// -h/--help (the command's help is on stdout), 2 after bad usage (the
// problem and the help are on stderr).
func parseArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (path string, code int, ok bool) {
	pos, code, ok := parsePositionals(fs, args, stdout, stderr, "PIPELINE.hcl")
	if !ok {
		return "", code, false
	}
	return pos[0], 0, true
}

// parsePositionals is parseArgs for a fixed list of named positional
// arguments (possibly none), flags allowed before, between and after them.
func parsePositionals(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, names ...string) ([]string, int, bool) {
	positional, code, ok := parseAll(fs, args, stdout, stderr)
	if !ok {
		return nil, code, false
	}
	if len(positional) != len(names) {
		want := "no arguments"
		if len(names) > 0 {
			want = "exactly one " + strings.Join(names, " ") + " argument"
		}
		fmt.Fprintf(stderr, "walcast %s: want %s, got %d\n\n", fs.Name(), want, len(positional))
		printHelp(stderr, fs)
		return nil, 2, false
	}
	return positional, 0, true
}

// parseAll is parsePositionals for any number of positional arguments,
// returned in order.
func parseAll(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]string, int, bool) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printHelp(stdout, fs)
				return nil, 0, false
			}
			// The flag package has printed the problem.
			fmt.Fprintln(stderr)
			printHelp(stderr, fs)
			return nil, 2, false
		}
		if fs.NArg() == 0 {
			return positional, 0, true
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("bad --log-format %q: want text or json", format)
}
