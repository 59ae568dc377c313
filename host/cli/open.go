package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/pauses"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/daemon"
	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/host/internal/report"
	"github.com/walcast/walcast/host/internal/source/capture"
)

// target is a pipeline a command acts on, opened: its file, a pool on its
// source database and the parts of its control plane there that commands
// change (parked events, pauses). The pool also serves the command's own
// queries (pg_replication_slots, backfills); close releases it.
type target struct {
	p      *config.Pipeline
	parked *parking.Store
	pauses *pauses.Store
	db     *pgxpool.Pool
}

func (t target) close() { t.db.Close() }

// openTarget is every pipeline command's first step: load the pipeline
// file at path, connect to its source and make sure the walcast schema is
// there. Problems are printed to stderr (the file's diagnostics as they
// are); ok is false after one.
func openTarget(ctx context.Context, path string, stderr io.Writer) (t target, ok bool) {
	p, ok := loadPipeline(path, stderr)
	if !ok {
		return target{}, false
	}
	t, err := dial(ctx, p)
	if err == nil {
		if err = schema.Migrate(ctx, t.db); err != nil {
			t.close()
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "walcast:", err)
		return target{}, false
	}
	return t, true
}

// loadPipeline loads the pipeline file at path, printing its diagnostics
// to stderr when it has errors.
func loadPipeline(path string, stderr io.Writer) (*config.Pipeline, bool) {
	p, diags := config.Load(path)
	if diags.HasErrors() {
		fmt.Fprint(stderr, config.FormatDiagnostics(diags))
		return nil, false
	}
	return p, true
}

// dial connects to p's source database and its control plane, without
// creating the walcast schema: openTarget does that, teardown must not
// (it would create what it is about to drop).
func dial(ctx context.Context, p *config.Pipeline) (target, error) {
	pool, err := daemon.Connect(ctx, p.Source.DSN)
	if err != nil {
		return target{}, explainSource(err, p.Source.DSN)
	}
	return target{p: p, parked: parking.New(pool, p.Name), pauses: pauses.New(pool, p.Name), db: pool}, nil
}

// report is what report.Gather reads of t: its pipeline as walcast status
// and the console show it.
func (t target) report() report.Pipeline {
	p := t.p
	rp := report.Pipeline{Name: p.Name, Slot: p.Source.Slot, DB: t.db,
		Capture: capture.Config{DSN: p.Source.DSN, Slot: p.Source.Slot, Publication: p.Source.Publication, Tables: p.Source.Tables, Pipeline: p.Name}}
	for _, s := range p.Sinks {
		rp.Sinks = append(rp.Sinks, report.Sink{ID: s.ID, Type: s.Type, Durable: s.Durable})
	}
	return rp
}

// explainSource says what a refusal of the source database means and what
// fixes it, in one line, the problem first: "role app could not log in:
// wrong password: correct the password in the dsn (…) (connect to …:
// FATAL: … (SQLSTATE 28P01))". Other errors are returned as they are.
func explainSource(err error, dsn string) error {
	var e *pg.Error
	if !errors.As(pg.Explain(err, pg.Role(dsn)), &e) {
		return err
	}
	return &commandError{e}
}

// commandError is a *pg.Error as a one-shot command reports it: without
// the run's "so walcast stops", which a command that exits anyway need
// not say.
type commandError struct{ e *pg.Error }

func (c *commandError) Error() string {
	return fmt.Sprintf("%s: %s (%v)", c.e.Problem, c.e.Fix, c.e.Err)
}

func (c *commandError) Unwrap() error { return c.e }
