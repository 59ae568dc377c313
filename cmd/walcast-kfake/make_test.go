package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMakeKafkaStopsCleanlyOnCtrlC runs `make kafka` as someone trying the
// kafka sink by hand does, and presses Ctrl-C: the terminal sends SIGINT
// to the whole foreground process group, make included. The broker must
// have been reachable, and the interrupt must end it without make
// reporting an error ("make: *** [kafka] Error 1" was what `go run` gave).
func TestMakeKafkaStopsCleanlyOnCtrlC(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed to run the kafka target:", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "kafka", "KAFKA_PORT=0", "BIN="+t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
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
	var out strings.Builder
	listening := make(chan string, 1)
	re := regexp.MustCompile(`^listening on (\S+)$`)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case listening <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }

	var addr string
	select {
	case addr = <-listening:
	case err := <-exited:
		t.Fatalf("make kafka exited before the broker listened: %v\n%s", err, output())
	case <-time.After(5 * time.Minute):
		t.Fatalf("make kafka: no broker within 5 minutes:\n%s", output())
	}
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("the broker make kafka announced at %s does not accept connections: %v", addr, err)
	}
	conn.Close()
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("make kafka still running a minute after Ctrl-C:\n%s", output())
	}
	// As for make demo: make may die of the same SIGINT, silently; the
	// broker failing is what must not happen.
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT) {
		t.Errorf("make kafka after Ctrl-C: %v, want exit 0 or make ending by the SIGINT itself\n%s", err, output())
	}
	if strings.Contains(output(), "make: ***") {
		t.Errorf("make reports an error after Ctrl-C:\n%s", output())
	}
}
