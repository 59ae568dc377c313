package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/pg"
)

// InstanceOptions configures RunInstance: one walcast process running
// several pipelines, each with its own slot, plugins and leadership.
type InstanceOptions struct {
	// Pipelines this process runs. Processes meant to share the load are
	// started with the same set.
	Pipelines []*config.Pipeline
	// Options apply to every pipeline (its Pipeline field is ignored);
	// MetricsListen serves all of them on one listener.
	Options
	// LaunchFor, when set, gives each pipeline its Launcher (instead of
	// Options.Launch).
	LaunchFor func(pipeline string) Launcher
	// MaxPipelines caps how many pipelines this process leads at once; it
	// stands by for the others. 0: no cap, only the fair share.
	MaxPipelines int
	// PollInterval is how often a standby tries a pipeline's lock and the
	// instances are counted (default 2s, see leader.Config).
	PollInterval time.Duration
}

// Roles of a pipeline in this process, as /metrics and /healthz show them.
const (
	roleStandby = "standby"
	roleLeader  = "leader"
	roleFailed  = "failed"
	roleStopped = "stopped"
)

// instance runs a process's pipelines. A pipeline leads only when the
// process is under its cap and under its fair share: ceil(pipelines on the
// source / instances present there), so that instances started with the
// same set spread the pipelines between them, and take over the share of
// one that disappears. An instance over its share (it started first, or
// one came back) hands the excess over gracefully.
type instance struct {
	opts   InstanceOptions
	log    *slog.Logger
	holder string
	states []*pipeState

	mu      sync.Mutex // guards leading, the groups' leading and the states' reserved
	leading int
}

// group is the pipelines of one source database: they share a presence
// session and a fair share.
type group struct {
	dsn       string
	pipelines []*pipeState
	presence  *leader.Presence
	leading   int  // guarded by instance.mu
	share     int  // guarded by instance.mu
	ready     bool // guarded by instance.mu: the instances were counted twice
	// over counts the counts in a row over the share with another
	// instance under it; wait is how many it takes to hand over (it
	// doubles when handing over did not help). Coordinator only.
	over, wait int
}

type pipeState struct {
	p     *config.Pipeline
	group *group

	mu       sync.Mutex
	role     string
	since    time.Time
	err      error
	term     *term // while leading, for /metrics and /healthz
	handover context.CancelFunc
	reserved bool // guarded by instance.mu
}

func (ps *pipeState) set(role string, err error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.role, ps.err, ps.since = role, err, time.Now()
}

func (ps *pipeState) get() (role string, err error, t *term) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.role, ps.err, ps.term
}

// groupBySource makes a state per pipeline, standing by, grouped by
// source database: one presence session per group.
func (in *instance) groupBySource() map[string]*group {
	groups := map[string]*group{}
	for _, p := range in.opts.Pipelines {
		g := groups[p.Source.DSN]
		if g == nil {
			g = &group{dsn: p.Source.DSN}
			groups[p.Source.DSN] = g
		}
		ps := &pipeState{p: p, group: g, role: roleStandby, since: time.Now()}
		g.pipelines = append(g.pipelines, ps)
		in.states = append(in.states, ps)
	}
	return groups
}

// RunInstance runs every pipeline of opts until ctx ends or none is left
// running. A pipeline that fails for good stops alone: the others go on,
// the failure is logged with what to do and shown by /metrics and
// /healthz, and RunInstance returns the failures once nothing runs any
// more (with one pipeline: its error, as it was).
func RunInstance(ctx context.Context, opts InstanceOptions) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts.defaults()
	host, _ := os.Hostname()
	in := &instance{opts: opts, log: log, holder: "walcast " + host + " pid " + strconv.Itoa(os.Getpid())}
	groups := in.groupBySource()
	// The metrics server stops last, after every pipeline's drain, final
	// checkpoints and plugins' Close, so all of it can be watched.
	if opts.MetricsListen != "" {
		stop, err := serveMetrics(opts.MetricsListen, in.gatherer(), in.health, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	// Presence sessions and their coordinators outlive the pipelines:
	// joined after them (defers run last in, first out).
	var coords sync.WaitGroup
	defer coords.Wait()
	coordCtx, stopCoord := context.WithCancel(ctx)
	defer stopCoord()
	if !opts.NoLeadership {
		for _, g := range groups {
			names := make([]string, len(g.pipelines))
			for i, ps := range g.pipelines {
				names[i] = ps.p.Name
			}
			g.share = len(g.pipelines)
			var err error
			g.presence, err = leader.Join(ctx, leader.Config{DSN: g.dsn, Holder: in.holder, Logger: log}, names)
			if err != nil {
				// Unreachable now: the pipelines report it below, each with
				// its own clear error, before standing by. An error retrying
				// cannot fix (a wrong password) ends them at once: a warning
				// first would only put the same cause before the real one.
				if !pg.Permanent(err) {
					log.Warn("cannot announce this walcast to the source database; every instance counts as alone", "err", err)
				}
				continue
			}
			defer g.presence.Close(context.WithoutCancel(ctx))
			coords.Go(func() { in.coordinate(coordCtx, g) })
		}
	}
	var pipes sync.WaitGroup
	errs := make([]error, len(in.states))
	for i, ps := range in.states {
		pipes.Go(func() {
			// An error retrying cannot fix says which role lacks what,
			// and the GRANT or setting that fixes it.
			err := pg.Explain(in.runPipeline(ctx, ps), pg.Role(ps.p.Source.DSN))
			if err == nil {
				ps.set(roleStopped, nil)
				return
			}
			ps.set(roleFailed, err)
			if len(in.states) == 1 {
				errs[i] = err
				return
			}
			errs[i] = fmt.Errorf("pipeline %s: %w", ps.p.Name, err)
			log.Error("pipeline stopped for good; the other pipelines go on: fix the cause, then restart walcast (walcast status shows the pipeline, /healthz and walcast_pipeline_failed flag it)",
				"pipeline", ps.p.Name, "err", err)
		})
	}
	pipes.Wait()
	return errors.Join(errs...)
}

func (o *Options) defaults() {
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = 250 * time.Millisecond
	}
	if o.WarnRetainedWAL == 0 {
		o.WarnRetainedWAL = 1 << 30
	}
	if o.SlotCheckInterval <= 0 {
		o.SlotCheckInterval = 10 * time.Second
	}
}

// runPipeline stands by for a pipeline, leads it, and stands by again when
// the leadership is lost or handed over, until ctx ends (nil) or the
// pipeline fails for good.
func (in *instance) runPipeline(ctx context.Context, ps *pipeState) error {
	opts := in.opts.Options
	opts.Pipeline = ps.p
	if in.opts.LaunchFor != nil {
		opts.Launch = in.opts.LaunchFor(ps.p.Name)
	}
	log := in.log.With("pipeline", ps.p.Name)
	// A clear error when the source cannot be reached at all, before any
	// standing by.
	pool, err := Connect(ctx, ps.p.Source.DSN)
	if err != nil {
		return err
	}
	pool.Close()
	for {
		var lease *leader.Lease
		if !opts.NoLeadership {
			ps.set(roleStandby, nil)
			lease, err = leader.Acquire(ctx, leader.Config{
				DSN: ps.p.Source.DSN, Pipeline: ps.p.Name, Holder: in.holder, Logger: log,
				PollInterval: in.opts.PollInterval,
				Admit:        func(unled int) (func(), bool) { return in.admit(ps, unled) },
			})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		tctx, handover := context.WithCancel(ctx)
		ps.mu.Lock()
		ps.role, ps.since, ps.handover = roleLeader, time.Now(), handover
		ps.mu.Unlock()
		err = in.lead(tctx, opts, lease, log, ps)
		handedOver := tctx.Err() != nil && ctx.Err() == nil
		handover()
		if lease != nil {
			lease.Release(context.WithoutCancel(ctx))
		}
		in.unreserve(ps)
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped while still starting: nothing was streamed,
			// nothing to report.
			err = nil
		}
		switch {
		case lease != nil && lease.Err() != nil && ctx.Err() == nil:
			log.Warn("standing by again after losing the leadership; what was not acknowledged is delivered again by whoever leads next",
				"err", lease.Err())
			continue
		case handedOver && (err == nil || errors.Is(err, context.Canceled)):
			log.Info("handed the pipeline over to another walcast to spread the pipelines evenly; standing by")
			continue
		}
		return err
	}
}

// lead runs one leadership term of the pipeline.
func (in *instance) lead(ctx context.Context, opts Options, lease *leader.Lease, log *slog.Logger, ps *pipeState) error {
	t, err := openTerm(ctx, opts, lease, log)
	if err != nil {
		return err
	}
	ps.mu.Lock()
	ps.term = t
	ps.mu.Unlock()
	err = t.run(ctx)
	t.close(ctx, ctx.Err() == nil)
	ps.mu.Lock()
	ps.term = nil
	ps.mu.Unlock()
	return err
}

// admit reserves a place for ps to lead if the process is under its cap,
// and under its fair share or the pipeline went unled for three polls (the
// instances under their share are capped or gone: lead it rather than
// leave it unled).
func (in *instance) admit(ps *pipeState, unled int) (release func(), ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	g := ps.group
	if ps.reserved {
		return func() { in.unreserve(ps) }, true
	}
	if in.opts.MaxPipelines > 0 && in.leading >= in.opts.MaxPipelines {
		return nil, false
	}
	if g.presence != nil && len(g.pipelines) > 1 {
		// Instances started together see each other before leading.
		if !g.ready || (g.leading >= g.share && unled < 3) {
			return nil, false
		}
	}
	in.leading++
	g.leading++
	ps.reserved = true
	return func() { in.unreserve(ps) }, true
}

func (in *instance) unreserve(ps *pipeState) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if ps.reserved {
		ps.reserved = false
		in.leading--
		ps.group.leading--
	}
}

// coordinate counts the instances present for the group's pipelines every
// poll interval and sets the fair share: ceil(pipelines / instances).
// When this instance leads more than its share while another leads less,
// for two counts in a row, it hands the excess over (a graceful stop of
// its newest leaderships: an instance under its share takes them within
// its poll interval). If they come back (the others are capped), it
// waits twice as long before trying again.
func (in *instance) coordinate(ctx context.Context, g *group) {
	every := in.opts.PollInterval
	if every <= 0 {
		every = 2 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	g.wait = 2
	for counted := 0; ; counted++ {
		loads, err := g.presence.Loads(ctx)
		if err != nil && ctx.Err() == nil {
			in.log.Warn("count the walcast instances running these pipelines", "err", err)
		}
		n := max(len(loads), 1)
		share := (len(g.pipelines) + n - 1) / n
		under := false
		for name, l := range loads {
			if name != in.holder && l < share {
				under = true
			}
		}
		in.mu.Lock()
		g.share = share
		g.ready = g.ready || counted >= 1
		excess := g.leading - share
		in.mu.Unlock()
		switch {
		case excess <= 0:
			g.over, g.wait = 0, 2
		case under:
			g.over++
		}
		if g.over >= g.wait {
			g.over = 0
			g.wait = min(2*g.wait, 64)
			in.handOver(g, excess, n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// handOver stops the n most recent leaderships of the group.
func (in *instance) handOver(g *group, n, instances int) {
	type led struct {
		ps    *pipeState
		since time.Time
		stop  context.CancelFunc
	}
	var leading []led
	for _, ps := range g.pipelines {
		ps.mu.Lock()
		if ps.role == roleLeader && ps.handover != nil {
			leading = append(leading, led{ps, ps.since, ps.handover})
		}
		ps.mu.Unlock()
	}
	slices.SortFunc(leading, func(a, b led) int { return b.since.Compare(a.since) })
	for _, l := range leading[:min(n, len(leading))] {
		in.log.Info("leading more than this walcast's fair share; handing the pipeline over",
			"pipeline", l.ps.p.Name, "instances", instances, "share", g.share)
		l.stop()
	}
}
