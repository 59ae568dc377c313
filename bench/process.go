package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is a child the bench started (walcast run, or walcast-bench's
// in-process daemon), its output going to <work>/<name>.log.
type process struct {
	cmd    *exec.Cmd
	name   string
	exited chan struct{} // closed once it exited; err is set by then
	err    error
	ex     *exit
}

// exit is the process's end, for waitEnd.
func (p *process) exit() *exit { return p.ex }

// spawn starts bin with args. ctx ending sends it SIGTERM (and SIGKILL a
// minute later), as an operator stopping walcast would.
func (e *env) spawn(ctx context.Context, name, bin string, args ...string) (*process, error) {
	logf, err := os.Create(filepath.Join(e.work, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	ex := newExit()
	p := &process{cmd: cmd, name: name, exited: ex.done, ex: ex}
	go func() { p.err = cmd.Wait(); logf.Close(); ex.close() }()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// kill ends p at once unless it has exited already: the cleanup of a run
// that failed half-way.
func (p *process) kill() {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// stopDaemon stops a daemon the way an operator does (SIGTERM) and
// reports how it ended.
func (e *env) stopDaemon(p *process) error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		p.kill()
		return errors.New("the daemon did not stop within a minute of SIGTERM")
	}
	if p.err != nil {
		return fmt.Errorf("walcast run: %w\n%s", p.err, e.tailLog(p.name))
	}
	return nil
}

// tailLog is the end of a child's log, for an error.
func (e *env) tailLog(name string) string {
	b, _ := os.ReadFile(filepath.Join(e.work, name+".log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(len(lines)-20, 0):], "\n")
}
