package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/pluginkit"
)

// abortTimeout bounds the best-effort abort after a failed transaction. It
// runs on a fresh context: the Deliver context has usually ended by then.
const abortTimeout = 10 * time.Second

// Sink produces batches to Kafka. The host calls it one batch at a time
// (Info.Ordered); the lock still serialises every call, because Serve may
// call Close on its own when the host goes away mid-Deliver.
type Sink struct {
	log *slog.Logger
	// lock is a one-slot semaphore rather than a sync.Mutex so that a
	// caller can give up waiting when its context ends.
	lock chan struct{}

	// Everything below is guarded by lock.
	cfg        settings
	configured bool
	opened     bool
	// conn is nil before Open and after a failure: the next Deliver
	// reconnects, which also settles a commit whose outcome was unknown.
	conn *conn
	// checkpoint is the last event id known to be committed under the
	// transactional id, with its epoch (eos only). Events at or below it
	// are duplicates, in a batch of its epoch.
	checkpoint checkpoint
	// fenced is set once another producer took the transactional id over;
	// from then on nothing is produced or committed, ever.
	fenced error
	// topics holds the topics known to exist.
	topics map[string]bool

	// beforeCommit, when set (tests only), runs after the batch is
	// produced and before the commit; an error aborts the transaction.
	beforeCommit func(ctx context.Context) error
}

// conn is one connection to the cluster: the producer and an admin client
// over the same connections.
type conn struct {
	cl  *kgo.Client
	adm *kadm.Client
}

// Interface guards.
var _ pluginkit.BatchSink = (*Sink)(nil)

// New returns a Kafka sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink {
	return &Sink{log: log, lock: make(chan struct{}, 1), topics: map[string]bool{}}
}

func (s *Sink) acquire(ctx context.Context) error {
	select {
	case s.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return pluginkit.Retryable(fmt.Errorf("wait for the sink's previous call: %w", ctx.Err()))
	}
}

func (s *Sink) release() { <-s.lock }

// Info describes the sink. Ordered: filtering at or below the checkpoint
// is only sound when batches commit in id order.
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{
		Name:    "kafka",
		Version: pluginkit.BuildVersion(),
		Config:  configFields,
		Ordered: true,
		Routes:  true, // the route is the topic
		// One transaction per batch, one batch at a time: its fixed cost
		// (begin, add partitions, the checkpoint record, commit) is paid
		// per Deliver, so this sink asks for larger batches than the
		// host's default 100 (docs/sinks.md). A delivery block's
		// batch_size still wins.
		BatchSize: defaultBatchSize,
	}
}

// defaultBatchSize is the batch size this sink asks for when the pipeline
// sets none.
const defaultBatchSize = 1000

// Configure validates the config, and every table's topic name; it
// contacts no broker. The sink's identity is its default transactional id.
func (s *Sink) Configure(ctx context.Context, setup pluginkit.Setup) error {
	st, err := decodeConfig(setup.Config, setup.Sink, setup.Tables)
	if err != nil {
		return err
	}
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	s.cfg, s.configured = st, true
	s.log.Info("kafka configured", "brokers", st.brokers, "topic_prefix", st.topicPrefix, "eos", st.eos,
		"transactional_id", st.txnID, "checkpoint_topic", st.checkpointTopic, "tls", st.tls != nil, "sasl", st.saslMechanism)
	return nil
}

// Open connects, and with eos claims the transactional id (fencing any
// predecessor) and reads the sink's checkpoint back. ctx is the host's
// open deadline.
func (s *Sink) Open(ctx context.Context) (pluginkit.OpenResult, error) {
	if err := s.acquire(ctx); err != nil {
		return pluginkit.OpenResult{}, err
	}
	defer s.release()
	if !s.configured {
		return pluginkit.OpenResult{}, pluginkit.Permanent(errors.New("open before configure"))
	}
	if err := s.connect(ctx); err != nil {
		return pluginkit.OpenResult{}, err
	}
	s.opened = true
	return pluginkit.OpenResult{Checkpoint: s.checkpoint.ID, Epoch: s.checkpoint.Epoch}, nil
}

// connect replaces s.conn with a fresh connection. With eos it is the
// recovery step too: claiming the transactional id makes the broker finish
// or abort whatever transaction an earlier connection (ours or a crashed
// predecessor's) left, so the checkpoint read afterwards is the truth.
func (s *Sink) connect(ctx context.Context) error {
	s.dropConn()
	st := s.cfg
	opts := append(st.clientOpts(),
		kgo.ProducerBatchCompression(st.compression),
		kgo.ProducerBatchMaxBytes(st.maxMessageBytes),
		kgo.ProducerLinger(0),
	)
	if st.eos {
		opts = append(opts, kgo.TransactionalID(st.txnID), kgo.TransactionTimeout(st.txnTimeout))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return pluginkit.Permanent(fmt.Errorf("create kafka client: %w", err))
	}
	c := &conn{cl: cl, adm: kadm.NewClient(cl)}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return s.classify("connect to the cluster", err)
	}
	if !st.eos {
		s.conn = c
		return nil
	}
	if err := s.ensureTopics(ctx, c, []string{st.checkpointTopic}, true); err != nil {
		cl.Close()
		return err
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return s.classify(fmt.Sprintf("claim transactional id %q", st.txnID), err)
	}
	cp, err := readCheckpoint(ctx, st, c.adm)
	if err != nil {
		cl.Close()
		return s.classify(fmt.Sprintf("read checkpoint of %q from topic %s", st.txnID, st.checkpointTopic), err)
	}
	if cp.Epoch == s.checkpoint.Epoch && cp.ID.Compare(s.checkpoint.ID) < 0 && !s.checkpoint.ID.IsZero() {
		// Only a checkpoint topic emptied behind our back gets here.
		s.log.Warn("checkpoint topic is behind what this process committed", "read", cp.ID.String(), "committed", s.checkpoint.ID.String())
		cp = s.checkpoint
	}
	s.checkpoint = cp
	s.conn = c
	s.log.Info("kafka connected", "transactional_id", st.txnID, "checkpoint", cp.ID.String(), "epoch", cp.Epoch)
	return nil
}

func (s *Sink) dropConn() {
	if s.conn != nil {
		s.conn.cl.Close()
		s.conn = nil
	}
}

// Deliver produces the batch. With eos it is one transaction that also
// moves the checkpoint, and nil means it committed. Events at or below the
// checkpoint are skipped as duplicates, except in a replay batch
// (Batch.Replay): parked events lie below the checkpoint by definition,
// and were never written. An event the cluster refuses on its own (a
// record over the size limit, a topic name Kafka does not accept) is named
// in a *pluginkit.BatchError while the others are written; a batch whose
// every event is refused fails as a whole. ctx ends at the sink's
// deliver_timeout.
func (s *Sink) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	events := b.Events
	if len(events) == 0 {
		return pluginkit.DeliverResult{}, nil
	}
	if err := s.acquire(ctx); err != nil {
		return pluginkit.DeliverResult{}, err
	}
	defer s.release()
	if !s.opened {
		return pluginkit.DeliverResult{}, pluginkit.Permanent(errors.New("deliver before open"))
	}
	if s.fenced != nil {
		return pluginkit.DeliverResult{}, pluginkit.Fatal(s.fenced)
	}
	if s.conn == nil {
		if err := s.connect(ctx); err != nil {
			return pluginkit.DeliverResult{}, err
		}
	}
	filter := s.cfg.eos && !b.Replay && s.checkpoint.Filters(b.Epoch)
	if s.cfg.eos && !b.Replay && !filter {
		s.log.Info("first batch of a new epoch (a failover, a restore or a lost slot since the checkpoint): written whole, whatever its ids",
			"first", events[0].ID.String(), "checkpoint", s.checkpoint.ID.String(), "checkpoint_epoch", s.checkpoint.Epoch, "epoch", b.Epoch)
	}
	fresh := make([]int, 0, len(events)) // indexes of the events to write
	for i, e := range events {
		if !filter || e.ID.Compare(s.checkpoint.ID) > 0 {
			fresh = append(fresh, i)
		}
	}
	res := pluginkit.DeliverResult{Duplicates: len(events) - len(fresh)}
	if res.Duplicates > 0 {
		// Only after a crash or a lost answer; worth a line.
		s.log.Info("skipped events already committed to Kafka", "duplicates", res.Duplicates,
			"first", events[0].ID.String(), "checkpoint", s.checkpoint.ID.String())
	}
	if len(fresh) == 0 {
		return res, nil
	}
	// The checkpoint record the transaction writes (epochs.Checkpoint.After;
	// a replay, of parked events perhaps of an earlier epoch, writes the
	// one it had).
	cur, epoch, replay := s.checkpoint, b.Epoch, b.Replay
	next := func(last pluginkit.EventID) checkpoint { return cur.After(last, epoch, replay) }
	return res, s.write(ctx, events, fresh, next)
}

// write writes the events at the indexes fresh, with a transaction for
// eos, and returns nil, a BatchError naming the events the cluster
// refused on their own, or the error of the batch as a whole.
func (s *Sink) write(ctx context.Context, events []pluginkit.Event, fresh []int, next func(pluginkit.EventID) checkpoint) error {
	var (
		refused map[int]error // by index in fresh
		err     error
	)
	if s.cfg.eos {
		refused, err = s.commitAround(ctx, pick(events, fresh), next)
	} else {
		refused, err = s.produce(ctx, pick(events, fresh))
	}
	switch {
	case err != nil:
		return err
	case len(refused) == 0:
		return nil
	case len(refused) == len(fresh):
		return refused[0] // nothing could be written: the batch fails
	}
	be := &pluginkit.BatchError{Failed: make(map[int]error, len(refused))}
	for i, err := range refused {
		be.Failed[fresh[i]] = err
	}
	return be
}

// pick returns the events at idx.
func pick(events []pluginkit.Event, idx []int) []pluginkit.Event {
	out := make([]pluginkit.Event, len(idx))
	for i, j := range idx {
		out[i] = events[j]
	}
	return out
}

// produce sends a batch without a transaction (eos = false) and returns
// the events the cluster refused on their own; the others are written.
func (s *Sink) produce(ctx context.Context, events []pluginkit.Event) (map[int]error, error) {
	c := s.conn
	recs, owner, refused, err := s.records(ctx, c, events)
	if err != nil {
		return nil, err
	}
	if err := s.produceAll(ctx, c, recs, owner); err != nil {
		var re *refusedEvents
		if !errors.As(err, &re) {
			s.dropConn()
			return nil, err
		}
		maps.Copy(refused, re.byIndex)
	}
	return refused, nil
}

// commitAround commits the events in one transaction, leaving out the
// events the cluster refuses on their own: a transaction with a refused
// record cannot commit, so it is aborted and run again without them. It
// returns the refused events by index.
func (s *Sink) commitAround(ctx context.Context, events []pluginkit.Event, next func(pluginkit.EventID) checkpoint) (map[int]error, error) {
	refused := map[int]error{}
	keep := make([]int, len(events))
	for i := range keep {
		keep[i] = i
	}
	for len(keep) > 0 {
		err := s.transact(ctx, pick(events, keep), next)
		var re *refusedEvents
		if !errors.As(err, &re) {
			return refused, err
		}
		for i, e := range re.byIndex {
			refused[keep[i]] = e
		}
		keep = slices.DeleteFunc(keep, func(i int) bool { return refused[i] != nil })
		if s.conn == nil && len(keep) > 0 {
			if err := s.connect(ctx); err != nil {
				return refused, err
			}
		}
	}
	return refused, nil
}

// refusedEvents says which events of a batch the cluster refused on their
// own, by index, each with its permanent error.
type refusedEvents struct {
	byIndex map[int]error
}

func (e *refusedEvents) Error() string {
	for _, err := range e.byIndex {
		return fmt.Sprintf("%d events refused, one: %v", len(e.byIndex), err)
	}
	return "no event refused"
}

// transact runs one transaction: the events, the checkpoint record next
// gives for the last of them (epochs.Checkpoint.After; a replay writes the one
// it had), commit.
// On any failure it aborts and drops the connection; the next Deliver
// reconnects and reads the checkpoint back, so even a commit whose outcome
// never reached us is settled before anything is produced again. Events
// the cluster refuses on their own come back as a *refusedEvents, and
// nothing is committed.
func (s *Sink) transact(ctx context.Context, events []pluginkit.Event, next func(pluginkit.EventID) checkpoint) error {
	c := s.conn
	last := events[len(events)-1].ID
	cp := next(last)
	// Give up well before the broker would abort the transaction itself:
	// a broker-side timeout bumps the epoch, which would look like fencing.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.txnTimeout*8/10)
	defer cancel()

	recs, owner, refused, err := s.records(ctx, c, events)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		return &refusedEvents{byIndex: refused}
	}
	cpRec := &kgo.Record{
		Topic: s.cfg.checkpointTopic,
		Key:   []byte(s.cfg.txnID),
		Value: []byte(cp.ID.String()),
	}
	if cp.Epoch != "" {
		cpRec.Headers = []kgo.RecordHeader{{Key: epochHeader, Value: []byte(cp.Epoch)}}
	}
	recs = append(recs, cpRec)
	if err := c.cl.BeginTransaction(); err != nil {
		return s.failed(ctx, c, false, s.classify("begin transaction", err))
	}
	err = s.produceAll(ctx, c, recs, owner)
	if err == nil && s.beforeCommit != nil {
		err = s.beforeCommit(ctx)
	}
	if err != nil {
		return s.failed(ctx, c, true, err)
	}
	if err := c.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		what := fmt.Sprintf("commit transaction of %s..%s", events[0].ID, last)
		if isFencedCommit(err) {
			return s.fence(what, err)
		}
		// The outcome may be unknown (the request went out and no answer
		// came back): do not abort, reconnect, which settles it.
		return s.failed(ctx, c, false, s.classify(what, err))
	}
	s.checkpoint = cp
	return nil
}

// failed ends a failed transaction: aborts it if asked, drops the
// connection, and remembers a fencing for good.
func (s *Sink) failed(ctx context.Context, c *conn, abort bool, err error) error {
	if abort && !isFenced(err) {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		aerr := c.cl.AbortBufferedRecords(actx)
		if aerr == nil {
			aerr = c.cl.EndTransaction(actx, kgo.TryAbort)
		}
		cancel()
		if aerr != nil {
			// Reconnecting claims the transactional id again, which
			// aborts the transaction on the broker anyway.
			s.log.Warn("abort transaction", "err", aerr)
		}
	}
	if isFenced(err) {
		return s.fence("", err)
	}
	s.dropConn()
	return err
}

// fence records for good that another producer took the transactional id
// over: this process never produces or commits again.
func (s *Sink) fence(what string, err error) error {
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	s.fenced = fmt.Errorf("fenced: another producer now uses transactional id %q (a restarted sink, or a second walcast running this sink); this one will never commit again: %w",
		s.cfg.txnID, err)
	s.log.Error("producer fenced", "transactional_id", s.cfg.txnID, "err", err)
	s.dropConn()
	return pluginkit.Fatal(s.fenced)
}

// records builds the Kafka records of a batch (see eventRecords), creating
// missing topics. owner maps each record to its event's index; an event
// whose table gives a topic name Kafka does not accept has no records and
// is refused (by index).
func (s *Sink) records(ctx context.Context, c *conn, events []pluginkit.Event) (recs []*kgo.Record, owner map[*kgo.Record]int, refused map[int]error, err error) {
	recs = make([]*kgo.Record, 0, len(events)+1)
	owner = make(map[*kgo.Record]int, len(events)+1)
	refused = map[int]error{}
	var missing []string
	for i := range events {
		e := &events[i]
		topic := s.cfg.topicFor(e.Schema, e.Table)
		if e.Route != "" {
			topic = e.Route // the sink's route expression chose it
		}
		if !s.topics[topic] && !slices.Contains(missing, topic) {
			if !legalTopic.MatchString(topic) && e.Route != "" {
				refused[i] = pluginkit.Permanent(fmt.Errorf("event %s: the route %q is not a topic name Kafka accepts (letters, digits, '.', '_', '-'; at most 249 characters): fix the sink's route expression",
					e.ID, topic))
				continue
			}
			if !legalTopic.MatchString(topic) {
				refused[i] = pluginkit.Permanent(fmt.Errorf("event %s: table %s.%s gives topic name %q, which Kafka does not accept (letters, digits, '.', '_', '-'; at most 249 characters): set a shorter name in topics",
					e.ID, e.Schema, e.Table, topic))
				continue
			}
			missing = append(missing, topic)
		}
		n := len(recs)
		recs = s.eventRecords(recs, topic, e)
		for _, r := range recs[n:] {
			owner[r] = i
		}
	}
	if len(missing) > 0 {
		if err := s.ensureTopics(ctx, c, missing, false); err != nil {
			return nil, nil, nil, err
		}
	}
	return recs, owner, refused, nil
}

// produceAll sends recs and waits for every acknowledgement. When every
// record that failed was refused for good and belongs to an event (owner),
// it returns a *refusedEvents naming those events; any other failure is
// the batch's.
func (s *Sink) produceAll(ctx context.Context, c *conn, recs []*kgo.Record, owner map[*kgo.Record]int) error {
	results := c.cl.ProduceSync(ctx, recs...)
	refused := map[int]error{}
	for _, r := range results {
		if r.Err == nil {
			continue
		}
		what := "produce to " + r.Record.Topic
		if id := header(r.Record, "walcast-id"); id != "" {
			what = fmt.Sprintf("produce event %s (%d bytes) to %s", id, len(r.Record.Key)+len(r.Record.Value), r.Record.Topic)
		}
		err := s.classify(what, r.Err)
		i, ok := owner[r.Record]
		if kind, _ := pluginkit.KindOf(err); !ok || kind != pluginkit.KindPermanent {
			return err
		}
		if refused[i] == nil {
			refused[i] = err
		}
	}
	if len(refused) > 0 {
		return &refusedEvents{byIndex: refused}
	}
	return nil
}

// Close disconnects. A transaction is never open between calls, so there
// is nothing to abort.
func (s *Sink) Close(ctx context.Context) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	s.dropConn()
	s.opened = false
	return nil
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
