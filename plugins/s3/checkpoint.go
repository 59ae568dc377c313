package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/walcast/walcast/pluginkit"
)

// checkpointDoc is the checkpoint object: the last event id such that this
// sink has written every event at or below it that walcast delivered to it
// (parked events aside), the epoch of its series, and when.
type checkpointDoc struct {
	Checkpoint string `json:"checkpoint"`
	// Epoch is pluginkit.Batch.Epoch of the batch that wrote Checkpoint;
	// absent when a host or a sink that predates epochs wrote it.
	Epoch     string `json:"epoch,omitempty"`
	Pipeline  string `json:"pipeline,omitempty"`
	Sink      string `json:"sink,omitempty"`
	UpdatedAt string `json:"updated_at"`
}

// checkpoint is the checkpoint object's id and epoch.
type checkpoint struct {
	id    pluginkit.EventID
	epoch string
}

// filters reports whether the checkpoint says anything about the ids of a
// batch of epoch: an id of another epoch does not (after a failover the
// new primary's ids can be lower than the ones written before), so such a
// batch is written whole. An empty epoch on either side compares equal.
func (c checkpoint) filters(epoch string) bool {
	return epoch == "" || c.epoch == "" || epoch == c.epoch
}

// after is the checkpoint once a batch of epoch whose last written event
// is last has been written. Within an epoch it never moves back; the first
// batch of a new epoch moves it to last, lower or not, with its epoch; an
// empty epoch keeps the stored one. A replay batch (parked events, of
// whatever epoch) moves neither.
func (c checkpoint) after(last pluginkit.EventID, epoch string, replay bool) checkpoint {
	switch {
	case replay:
		return c
	case !c.filters(epoch):
		return checkpoint{id: last, epoch: epoch}
	}
	next := checkpoint{id: c.id, epoch: cmp.Or(epoch, c.epoch)}
	if last.Compare(c.id) > 0 {
		next.id = last
	}
	return next
}

// readCheckpoint reads the checkpoint object; zero when there is none yet.
func (s *Sink) readCheckpoint(ctx context.Context) (checkpoint, error) {
	what := fmt.Sprintf("read checkpoint %s in bucket %s", s.cfg.checkpointKey, s.cfg.bucket)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.cfg.bucket),
		Key:    aws.String(s.cfg.checkpointKey),
	})
	if _, missing := errors.AsType[*types.NoSuchKey](err); missing || errorCode(err) == "NoSuchKey" {
		return checkpoint{}, nil
	}
	if err != nil {
		return checkpoint{}, s.classify(what, err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(io.LimitReader(out.Body, 1<<20))
	if err != nil {
		return checkpoint{}, s.classify(what, err)
	}
	var doc checkpointDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return checkpoint{}, pluginkit.Fatal(fmt.Errorf("%s: not a checkpoint written by this sink (%v): delete it, or set checkpoint_key to a key of this sink's own", what, err))
	}
	id, err := pluginkit.ParseEventID(doc.Checkpoint)
	if err != nil {
		return checkpoint{}, pluginkit.Fatal(fmt.Errorf("%s: %w", what, err))
	}
	return checkpoint{id: id, epoch: doc.Epoch}, nil
}

// writeCheckpoint stores cp as the checkpoint.
func (s *Sink) writeCheckpoint(ctx context.Context, cp checkpoint) error {
	body, err := json.Marshal(checkpointDoc{
		Checkpoint: cp.id.String(),
		Epoch:      cp.epoch,
		Pipeline:   s.identity.Pipeline,
		Sink:       s.identity.SinkID,
		UpdatedAt:  time.Now().UTC().Format(time.RFC3339Nano),
	})
	if err != nil {
		return pluginkit.Permanent(fmt.Errorf("encode checkpoint: %w", err))
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.cfg.bucket),
		Key:           aws.String(s.cfg.checkpointKey),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String("application/json"),
	})
	if err != nil {
		return s.classify(fmt.Sprintf("write checkpoint %s to %s in bucket %s", cp.id, s.cfg.checkpointKey, s.cfg.bucket), err)
	}
	return nil
}
