package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMakeDemoStopsCleanlyOnCtrlC runs `make demo` the way a newcomer
// does (into a private BIN directory, with DEMO_PORT so that psql can be
// pointed at its PostgreSQL) and presses Ctrl-C: the terminal sends
// SIGINT to the whole foreground process group, make included. The demo's
// PostgreSQL must have listened on DEMO_PORT, the demo must have said how
// to stop it, and the interrupt must end it with exit 0 and without make
// reporting an error.
func TestMakeDemoStopsCleanlyOnCtrlC(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed to run the demo target:", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "demo", "BIN="+t.TempDir(), fmt.Sprintf("DEMO_PORT=%d", port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		exited <- err
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})

	var mu sync.Mutex
	var out bytes.Buffer
	firstEvent := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		seen := false
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if !seen && strings.HasPrefix(sc.Text(), `{"id":`) {
				seen = true
				close(firstEvent)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }

	// Building every binary and starting PostgreSQL takes a while on a
	// loaded machine.
	select {
	case <-firstEvent:
	case err := <-exited:
		t.Fatalf("make demo exited before the first event: %v\n%s", err, output())
	case <-time.After(5 * time.Minute):
		t.Fatalf("no event printed within 5 minutes:\n%s", output())
	}
	// A client of its own reaches the demo's PostgreSQL on DEMO_PORT,
	// and sees the table the events come from.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port))
	if err != nil {
		cancel()
		t.Fatalf("connect to the demo's PostgreSQL on DEMO_PORT %d: %v\n%s", port, err, output())
	}
	var dbs int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE 'demo%'`).Scan(&dbs)
	conn.Close(context.Background())
	cancel()
	if err != nil || dbs != 1 {
		t.Errorf("the server on DEMO_PORT %d has %d demo databases (%v), want the demo's", port, dbs, err)
	}
	if !strings.Contains(output(), fmt.Sprintf("127.0.0.1:%d/", port)) {
		t.Errorf("the demo does not print the DSN on DEMO_PORT %d:\n%s", port, output())
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("make demo still running 2 minutes after Ctrl-C:\n%s", output())
	}
	got := output()
	// make, interrupted itself, waits for the demo and then dies of the
	// same SIGINT (a shell shows status 130, as for any program stopped
	// with Ctrl-C) without a message of its own; what must not happen is
	// the demo failing, which make reports as "make: *** [...] Error 1".
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT) {
		t.Errorf("make demo after Ctrl-C: %v, want exit 0 or make ending by the SIGINT itself\n%s", err, got)
	}
	if !strings.Contains(got, "Press Ctrl-C to stop") {
		t.Errorf("the demo does not say how to stop it:\n%s", got)
	}
	if strings.Contains(got, "make: ***") {
		t.Errorf("make reports an error after Ctrl-C:\n%s", got)
	}
	if !strings.Contains(got, "PostgreSQL stopped and removed") {
		t.Errorf("the demo did not clean up its PostgreSQL:\n%s", got)
	}
}

// freePort is a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
