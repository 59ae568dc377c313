package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMakeDemoStopsCleanlyOnCtrlC runs `make demo` the way a newcomer
// does (into a private BIN directory) and presses Ctrl-C: the terminal
// sends SIGINT to the whole foreground process group, make included. The
// demo must have said how to stop it, and the interrupt must end it with
// exit 0 and without make reporting an error.
func TestMakeDemoStopsCleanlyOnCtrlC(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed to run the demo target:", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "demo", "BIN="+t.TempDir())
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
