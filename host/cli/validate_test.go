package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestScript runs the txtar scripts in testdata/validate against the
// walcast binary TestMain built, as a user would: walcast and the built-in
// plugins are on PATH and in $WALCAST_PLUGIN_DIR, and $WALCAST_SOURCE_DSN
// names a fresh database of the test cluster.
//
// Besides testscript's own commands, scripts have:
//
//	exits N program [args...]   run program and require exit status N
//	sql 'QUERY'                 run QUERY in $WALCAST_SOURCE_DSN; stdout is
//	                            the rows, one per line, columns tab-separated
func TestScript(t *testing.T) {
	pluginDir, err := filepath.EvalSymlinks(binDir)
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../pipeline.hcl.example")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/validate",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", pluginDir+string(os.PathListSeparator)+env.Getenv("PATH"))
			// The plugin directory is also the walcast executable's own,
			// the last place searched; a "plugin not found" message lists
			// it once.
			env.Setenv("WALCAST_PLUGIN_DIR", pluginDir)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dsn, err := cluster.CreateDatabase(ctx, "script")
			if err != nil {
				return err
			}
			env.Setenv("WALCAST_SOURCE_DSN", dsn)
			return os.WriteFile(filepath.Join(env.WorkDir, "pipeline.hcl.example"), example, 0o644)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits": cmdExits,
			"sql":   cmdSQL,
		},
	})
}

// cmdExits runs a program like exec, but requires one exit status: a CLI's
// status is part of its interface (1: the file or the operation failed,
// 2: usage error), which exec and ! exec cannot tell apart.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exits")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exits N program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad status %q", args[0])
	}
	got := 0
	var exitErr *exec.ExitError
	switch err := ts.Exec(args[1], args[2:]...); {
	case err == nil:
	case errors.As(err, &exitErr):
		got = exitErr.ExitCode()
	default:
		ts.Fatalf("exits: %v", err)
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// cmdSQL runs one query against the script's database and writes the rows
// to stdout, so that stdout and cmp can check them.
func cmdSQL(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sql 'QUERY'")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, ts.Getenv("WALCAST_SOURCE_DSN"))
	ts.Check(err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, args[0], pgx.QueryExecModeSimpleProtocol)
	ts.Check(err)
	var out strings.Builder
	for rows.Next() {
		// The simple protocol returns every value in its text form.
		for i, v := range rows.RawValues() {
			if i > 0 {
				out.WriteByte('\t')
			}
			if v == nil {
				v = []byte("NULL")
			}
			out.Write(v)
		}
		out.WriteByte('\n')
	}
	ts.Check(rows.Err())
	_, err = io.WriteString(ts.Stdout(), out.String())
	ts.Check(err)
}
