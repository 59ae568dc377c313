package host

import (
	"errors"
	"fmt"

	"github.com/walcast/walcast/host/internal/delivery/rules"
)

// Transform says what a stream's events carry of each row, as a sink's
// transform block does (docs/filters.md): drop or keep, mask, rename,
// then set, applied to key, new, old and unchanged alike. The event id
// never changes.
type Transform struct {
	// Drop removes these columns.
	Drop []string
	// Keep, when not empty, removes every other column from new and old.
	Keep []string
	// Mask maps a column to "sha256" (the hex SHA-256 of its text) or
	// "redact" ("***").
	Mask map[string]string
	// Rename maps a column to the name events carry it under.
	Rename map[string]string
	// Set adds columns to new, each a CEL expression over the event as
	// captured.
	Set map[string]string
}

// compileRules compiles the stream's filter and transform; nil when it
// has neither.
func (cfg *StreamConfig) compileRules() (*rules.Rules, error) {
	spec := rules.Spec{Filter: cfg.Filter, Transform: rules.Transform(cfg.Transform)}
	if spec.Empty() {
		return nil, nil
	}
	if cfg.Format != "" && cfg.Format != "walcast" {
		return nil, fmt.Errorf("open walcast stream: Filter and Transform work on walcast's envelope, not on Format %q", cfg.Format)
	}
	r, probs := rules.Compile(spec)
	if len(probs) > 0 {
		errs := make([]error, len(probs))
		for i, p := range probs {
			errs[i] = p
		}
		return nil, fmt.Errorf("open walcast stream: %w", errors.Join(errs...))
	}
	return r, nil
}
