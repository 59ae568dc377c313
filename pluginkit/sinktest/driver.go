package sinktest

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// The checks are written once, against tb, and driven two ways: by Run
// from a sink's own go test (each check a subtest of a *testing.T), and by
// Check outside go test, where `walcast plugin test` drives a plugin
// binary of any language through the host's plugin client. Both run the
// same checks in the same order with the same verdicts.

// tb is the part of testing.T the checks use. Fatal and Skip end the
// calling check's goroutine (runtime.Goexit), as testing.T's do, so they
// must be called from the goroutine running the check.
type tb interface {
	Helper()
	Name() string
	// Context ends when the check does.
	Context() context.Context
	Cleanup(f func())
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Failed() bool
	// Run runs f as a check of its own named name and waits for it.
	Run(name string, f func(t tb)) bool
}

// goTest drives the checks from go test: a tb over a *testing.T.
type goTest struct {
	*testing.T
	ctx context.Context
}

func newGoTest(t *testing.T) *goTest {
	// A context of our own rather than t.Context, which needs go1.24: the
	// SDK keeps its go directive low for sinks on older toolchains.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &goTest{T: t, ctx: ctx}
}

func (g *goTest) Context() context.Context { return g.ctx }

func (g *goTest) Run(name string, f func(t tb)) bool {
	return g.T.Run(name, func(t *testing.T) { f(newGoTest(t)) })
}

// Outcome is how one check ended.
type Outcome string

// The outcomes of a check.
const (
	Pass Outcome = "PASS"
	Fail Outcome = "FAIL"
	Skip Outcome = "SKIP"
)

// Result is the outcome of one check run by Check.
type Result struct {
	// Name is the check's path, as go test names the subtest below the
	// test that calls Run: "Deliver/Batches".
	Name string
	// Outcome is Pass, Fail or Skip. A check fails when one of its own
	// subchecks does.
	Outcome Outcome
	// Output holds what the check reported: the failures, or why it was
	// skipped.
	Output []string
	// Elapsed is how long the check ran.
	Elapsed time.Duration
	// Parent is true for a check made of subchecks, which are reported
	// before it.
	Parent bool
}

// Check runs the conformance suite outside go test and reports each
// check to report as it ends, subchecks before the check holding them (the
// order of go test -v). It returns whether every check passed or was
// skipped. report is called from one goroutine at a time.
//
// Run is what a sink's own tests call. Check is for drivers that are not
// go test: `walcast plugin test` uses it with a Config.New that launches
// the plugin binary under test, so that a sink written in any language
// meets the same checks. ctx ends every check still running.
func Check(ctx context.Context, cfg Config, report func(Result)) bool {
	root := &node{report: report, ctx: ctx}
	return root.Run("", func(t tb) { runSuite(t, cfg) })
}

// node is one check run by Check: a tb that records what the check
// reports.
type node struct {
	name   string
	report func(Result)
	ctx    context.Context

	mu       sync.Mutex
	failed   bool
	skipped  bool
	children bool
	output   []string
	cleanups []func()
}

var _ tb = (*node)(nil)

func (n *node) Helper()                  {}
func (n *node) Name() string             { return n.name }
func (n *node) Context() context.Context { return n.ctx }

func (n *node) Cleanup(f func()) {
	n.mu.Lock()
	n.cleanups = append(n.cleanups, f)
	n.mu.Unlock()
}

func (n *node) Error(args ...any) { n.log(true, fmt.Sprintln(args...)) }

func (n *node) Errorf(format string, args ...any) { n.log(true, fmt.Sprintf(format, args...)) }

func (n *node) Fatal(args ...any) {
	n.log(true, fmt.Sprintln(args...))
	runtime.Goexit()
}

func (n *node) Fatalf(format string, args ...any) {
	n.log(true, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (n *node) Skip(args ...any) {
	n.mu.Lock()
	n.skipped = true
	n.mu.Unlock()
	n.log(false, fmt.Sprintln(args...))
	runtime.Goexit()
}

func (n *node) Failed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.failed
}

func (n *node) log(fail bool, msg string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if fail {
		n.failed = true
	}
	n.output = append(n.output, strings.TrimSuffix(msg, "\n"))
}

// Run runs f on a goroutine of its own, so that Fatal and Skip can end it
// as they end a subtest, and waits for it. A panic in the check itself
// (not in the sink: calls into the sink are guarded) fails the check.
func (n *node) Run(name string, f func(t tb)) bool {
	// Named as go test names subtests, so that Config.Skip and -run
	// patterns mean the same under both drivers.
	name = strings.ReplaceAll(name, " ", "_")
	child := &node{name: name, report: n.report}
	if n.name != "" {
		child.name = n.name + "/" + name
	}
	ctx, cancel := context.WithCancel(n.ctx)
	child.ctx = ctx
	n.mu.Lock()
	n.children = true
	n.mu.Unlock()

	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		defer child.runCleanups()
		defer func() {
			if r := recover(); r != nil {
				child.log(true, fmt.Sprintf("panic: %v\n\n%s", r, debug.Stack()))
			}
		}()
		f(child)
	}()
	<-done

	failed := child.Failed()
	if failed {
		n.mu.Lock()
		n.failed = true
		n.mu.Unlock()
	}
	if child.name != "" && n.report != nil {
		n.report(child.result(time.Since(start)))
	}
	return !failed
}

// runCleanups runs the functions registered with Cleanup, last first.
func (n *node) runCleanups() {
	for {
		n.mu.Lock()
		k := len(n.cleanups)
		if k == 0 {
			n.mu.Unlock()
			return
		}
		f := n.cleanups[k-1]
		n.cleanups = n.cleanups[:k-1]
		n.mu.Unlock()
		f()
	}
}

func (n *node) result(elapsed time.Duration) Result {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := Result{Name: n.name, Outcome: Pass, Output: n.output, Elapsed: elapsed, Parent: n.children}
	switch {
	case n.failed:
		r.Outcome = Fail
	case n.skipped:
		r.Outcome = Skip
	}
	return r
}
