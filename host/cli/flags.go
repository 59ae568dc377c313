package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// parseArgs parses flags that may come before or after the one positional
// PIPELINE.hcl argument (the standard flag package stops at the first
// positional one).
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (string, bool) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return "", false
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "walcast %s: want exactly one PIPELINE.hcl argument, got %d\n", fs.Name(), len(positional))
		return "", false
	}
	return positional[0], true
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
