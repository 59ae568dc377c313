package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/walcast/walcast/pluginkit"
)

// objectConcurrency is how many objects of one batch (one per table and
// date) are encoded and uploaded at once.
const objectConcurrency = 8

// encoder turns an object's events into the object's bytes.
type encoder interface {
	encode(o *object) ([]byte, error)
	contentType() string
}

// Sink writes each batch as objects, one per table and commit date, then
// its checkpoint object. The host calls it one batch at a time
// (Info.Ordered); the lock still serialises every call, because Serve may
// call Close on its own when the host goes away mid-Deliver.
type Sink struct {
	log *slog.Logger
	// lock is a one-slot semaphore rather than a sync.Mutex so that a
	// caller can give up waiting when its context ends.
	lock chan struct{}

	// Everything below is guarded by lock.
	cfg        settings
	identity   pluginkit.Identity
	configured bool
	opened     bool
	client     *s3.Client
	transport  *http.Transport
	region     string
	enc        encoder
	extension  string
	// checkpoint is the last event id such that every event at or below
	// it, of its epoch, that reached this sink is in the bucket (parked
	// ones aside): the checkpoint object's content once written.
	checkpoint checkpoint

	// beforeCheckpoint, when set (tests only), runs after a batch's
	// objects are written and before its checkpoint; an error fails the
	// batch there, as a crash at that point would.
	beforeCheckpoint func(ctx context.Context) error
}

// Interface guards.
var _ pluginkit.BatchSink = (*Sink)(nil)

// New returns an S3 sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink {
	return &Sink{log: log, lock: make(chan struct{}, 1)}
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

// Info describes the sink. Ordered: the checkpoint means "everything at or
// below it is stored", which holds only when batches are written in id
// order.
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{
		Name:      "s3",
		Version:   pluginkit.BuildVersion(),
		Config:    configFields,
		Ordered:   true,
		BatchSize: defaultBatchSize,
	}
}

// Configure validates the config and builds the client from it and the
// SDK's local sources (files, environment); it contacts nothing.
func (s *Sink) Configure(ctx context.Context, setup pluginkit.Setup) error {
	st, err := decodeConfig(setup.Config, setup.Sink)
	if err != nil {
		return err
	}
	client, tr, err := newClient(ctx, st)
	if err != nil {
		return &pluginkit.ConfigError{Field: "profile", Msg: err.Error()}
	}
	var enc encoder = &parquetEncoder{version: pluginkit.BuildVersion()}
	if st.format == formatJSONL {
		if enc, err = newJSONLEncoder(st.compression); err != nil {
			return pluginkit.Permanent(err)
		}
	}
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	s.cfg, s.identity, s.configured = st, setup.Sink, true
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	s.client, s.transport, s.region, s.enc, s.extension = client, tr, client.Options().Region, enc, ext(st.format, st.compression)
	s.log.Info("s3 configured", "bucket", st.bucket, "prefix", st.prefix, "endpoint", s.where(),
		"path_style", st.pathStyle, "format", s.extension, "checkpoint_key", st.checkpointKey)
	return nil
}

// Open checks that credentials can be found and reads the checkpoint back,
// which also proves that the bucket exists and lets us in. ctx is the
// host's open deadline.
func (s *Sink) Open(ctx context.Context) (pluginkit.OpenResult, error) {
	if err := s.acquire(ctx); err != nil {
		return pluginkit.OpenResult{}, err
	}
	defer s.release()
	if !s.configured {
		return pluginkit.OpenResult{}, pluginkit.Permanent(errors.New("open before configure"))
	}
	if _, err := s.client.Options().Credentials.Retrieve(ctx); err != nil {
		return pluginkit.OpenResult{}, pluginkit.Fatal(fmt.Errorf("find AWS credentials: %w; set access_key_id and secret_access_key, a profile, pass AWS_* variables with the sink's env attribute, or run with an instance or container role", err))
	}
	cp, err := s.readCheckpoint(ctx)
	if err != nil {
		return pluginkit.OpenResult{}, err
	}
	// Within an epoch the higher of what is read and what this process
	// wrote; a checkpoint of another epoch is taken as read.
	if cp.Epoch != s.checkpoint.Epoch || cp.ID.Compare(s.checkpoint.ID) > 0 {
		s.checkpoint = cp
	}
	s.opened = true
	s.log.Info("s3 opened", "bucket", s.cfg.bucket, "checkpoint", s.checkpoint.ID.String(), "epoch", s.checkpoint.Epoch)
	return pluginkit.OpenResult{Checkpoint: s.checkpoint.ID, Epoch: s.checkpoint.Epoch}, nil
}

// Deliver writes the batch: its events cut into objects (one per table and
// commit date, split above max_object_bytes), every object uploaded, then
// the checkpoint moved to the batch's last event. nil means all of it is
// stored. Events at or below the checkpoint are skipped as duplicates
// unless the batch is a replay (Batch.Replay), whose parked events lie
// below it and were never written; a replay never moves the checkpoint.
// Nor are they in a batch of another epoch than the checkpoint's
// (Batch.Epoch): after a failover the new slot's ids can be lower than
// the checkpoint, so the first batch of a new epoch is written whole and
// moves the checkpoint, with its epoch, to its last id.
// ctx ends at the sink's deliver_timeout.
func (s *Sink) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	if len(b.Events) == 0 {
		return pluginkit.DeliverResult{}, nil
	}
	if err := s.acquire(ctx); err != nil {
		return pluginkit.DeliverResult{}, err
	}
	defer s.release()
	if !s.opened {
		return pluginkit.DeliverResult{}, pluginkit.Permanent(errors.New("deliver before open"))
	}
	fresh, res := s.fresh(b)
	if len(fresh) == 0 {
		return res, nil
	}
	objs, refused := cut(b.Events, fresh, s.cfg.maxObjectBytes)
	if err := s.writeObjects(ctx, objs, refused); err != nil {
		return res, err
	}
	if next := s.checkpoint.After(b.Events[fresh[len(fresh)-1]].ID, b.Epoch, b.Replay); next != s.checkpoint {
		if s.beforeCheckpoint != nil {
			if err := s.beforeCheckpoint(ctx); err != nil {
				return res, err
			}
		}
		if err := s.writeCheckpoint(ctx, next); err != nil {
			return res, err
		}
		s.checkpoint = next
	}
	if len(refused) > 0 {
		return res, &pluginkit.BatchError{Failed: refused}
	}
	return res, nil
}

// fresh returns the indexes of the batch's events to write: those above
// the checkpoint, or all of them in a replay batch or a batch of another
// epoch than the checkpoint's. The others are counted as duplicates.
func (s *Sink) fresh(b pluginkit.Batch) ([]int, pluginkit.DeliverResult) {
	filter := !b.Replay && s.checkpoint.Filters(b.Epoch)
	if !b.Replay && !filter {
		s.log.Info("first batch of a new epoch (a failover, a restore or a lost slot since the checkpoint): written whole, whatever its ids",
			"first", b.Events[0].ID.String(), "checkpoint", s.checkpoint.ID.String(), "checkpoint_epoch", s.checkpoint.Epoch, "epoch", b.Epoch)
	}
	fresh := make([]int, 0, len(b.Events)) // indexes of the events to write
	for i, e := range b.Events {
		if !filter || e.ID.Compare(s.checkpoint.ID) > 0 {
			fresh = append(fresh, i)
		}
	}
	res := pluginkit.DeliverResult{Duplicates: len(b.Events) - len(fresh)}
	if res.Duplicates > 0 {
		// Only after a crash or a lost answer; worth a line.
		s.log.Info("skipped events already stored", "duplicates", res.Duplicates,
			"first", b.Events[0].ID.String(), "checkpoint", s.checkpoint.ID.String())
	}
	return fresh, res
}

// writeObjects encodes and uploads objs, objectConcurrency at a time. An
// object S3 or the encoder refuses on its own (a permanent error) adds its
// events to refused; any other failure is the batch's, and returned: the
// most severe of them (fatal, then throttled, then retryable).
func (s *Sink) writeObjects(ctx context.Context, objs []*object, refused map[int]error) error {
	errs := make([]error, len(objs))
	sem := make(chan struct{}, objectConcurrency)
	var wg sync.WaitGroup
	for i, o := range objs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = s.writeObject(ctx, o)
		}()
	}
	wg.Wait()
	var worst error
	worstRank := -1
	for i, err := range errs {
		if err == nil {
			continue
		}
		kind, _ := pluginkit.KindOf(err)
		if kind == pluginkit.KindPermanent {
			for _, j := range objs[i].idx {
				refused[j] = err
			}
			continue
		}
		if r := severity(kind); r > worstRank {
			worst, worstRank = err, r
		}
	}
	return worst
}

// severity orders the kinds that fail a whole batch.
func severity(k pluginkit.Kind) int {
	switch k {
	case pluginkit.KindFatal:
		return 2
	case pluginkit.KindThrottled:
		return 1
	}
	return 0
}

// writeObject encodes one object and uploads it.
func (s *Sink) writeObject(ctx context.Context, o *object) error {
	key := o.key(s.cfg.prefix, s.extension)
	body, err := s.enc.encode(o)
	if err != nil {
		return pluginkit.Permanent(fmt.Errorf("encode %s: %w", key, err))
	}
	return s.put(ctx, upload{
		key:         key,
		body:        body,
		contentType: s.enc.contentType(),
		meta: map[string]string{
			"walcast-first-id": o.first().String(),
			"walcast-last-id":  o.last().String(),
			"walcast-events":   strconv.Itoa(len(o.events)),
		},
	})
}

// Close releases the client's idle connections. Nothing is ever left
// half-done between calls: a failed multipart upload is aborted in Deliver.
func (s *Sink) Close(ctx context.Context) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	s.opened = false
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	return nil
}
