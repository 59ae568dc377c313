package main

import (
	"bytes"
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
	"github.com/walcast/walcast/plugins/internal/epochs"
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

// checkpoint is the last event id this sink wrote and the epoch of the
// batch that wrote it; epochs.Checkpoint says what it covers.
type checkpoint = epochs.Checkpoint

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
	return checkpoint{ID: id, Epoch: doc.Epoch}, nil
}

// writeCheckpoint stores cp as the checkpoint.
func (s *Sink) writeCheckpoint(ctx context.Context, cp checkpoint) error {
	body, err := json.Marshal(checkpointDoc{
		Checkpoint: cp.ID.String(),
		Epoch:      cp.Epoch,
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
		return s.classify(fmt.Sprintf("write checkpoint %s to %s in bucket %s", cp.ID, s.cfg.checkpointKey, s.cfg.bucket), err)
	}
	return nil
}
