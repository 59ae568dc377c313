package main

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// abortTimeout bounds the best-effort abort of a failed multipart upload.
// It runs on a fresh context: the Deliver context has usually ended by then.
const abortTimeout = 30 * time.Second

// partConcurrency is how many parts of one multipart upload go up at once.
const partConcurrency = 4

// upload is one object to write.
type upload struct {
	key         string
	body        []byte
	contentType string
	meta        map[string]string
}

// put writes one object: in one PUT up to multipart_threshold, else as a
// multipart upload. Either way the object appears whole or not at all: S3
// makes a PUT visible only once it is complete, and the parts of a
// multipart upload only when it is completed.
func (s *Sink) put(ctx context.Context, u upload) error {
	if int64(len(u.body)) > s.cfg.multipartAbove {
		return s.putMultipart(ctx, u)
	}
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.cfg.bucket),
		Key:           aws.String(u.key),
		Body:          bytes.NewReader(u.body),
		ContentLength: aws.Int64(int64(len(u.body))),
		ContentType:   aws.String(u.contentType),
		Metadata:      u.meta,
	})
	if err != nil {
		return s.classify(fmt.Sprintf("put %s (%d bytes)", u.key, len(u.body)), err)
	}
	return nil
}

// putMultipart writes one object as a multipart upload of part_size parts,
// partConcurrency at a time, and aborts the upload when a part or the
// completion fails, so that no parts are left behind to pay for (a bucket
// lifecycle rule "AbortIncompleteMultipartUpload" catches what a killed
// process leaves).
func (s *Sink) putMultipart(ctx context.Context, u upload) error {
	what := fmt.Sprintf("multipart upload of %s (%d bytes)", u.key, len(u.body))
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:      aws.String(s.cfg.bucket),
		Key:         aws.String(u.key),
		ContentType: aws.String(u.contentType),
		Metadata:    u.meta,
	})
	if err != nil {
		return s.classify("start "+what, err)
	}
	parts, err := s.uploadParts(ctx, u, created.UploadId)
	if err == nil {
		_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
			Bucket:          aws.String(s.cfg.bucket),
			Key:             aws.String(u.key),
			UploadId:        created.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		})
		if err != nil {
			err = s.classify("complete "+what, err)
		}
	}
	if err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		if _, aerr := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(s.cfg.bucket), Key: aws.String(u.key), UploadId: created.UploadId,
		}); aerr != nil {
			s.log.Warn("abort multipart upload", "key", u.key, "err", aerr)
		}
		return err
	}
	return nil
}

// uploadParts uploads the parts of u and returns them in order. The first
// part that fails cancels the others, and its error is the one returned.
func (s *Sink) uploadParts(ctx context.Context, u upload, id *string) ([]types.CompletedPart, error) {
	size := s.cfg.partSize
	n := (int64(len(u.body)) + size - 1) / size
	parts := make([]types.CompletedPart, n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
			cancel()
		}
	}
	sem := make(chan struct{}, partConcurrency)
loop:
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			fail(s.classify("upload parts of "+u.key, ctx.Err()))
			break loop
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			chunk := u.body[i*size : min(int64(len(u.body)), (i+1)*size)]
			num := aws.Int32(int32(i + 1))
			out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
				Bucket: aws.String(s.cfg.bucket), Key: aws.String(u.key), UploadId: id,
				PartNumber: num, Body: bytes.NewReader(chunk), ContentLength: aws.Int64(int64(len(chunk))),
			})
			if err != nil {
				fail(s.classify(fmt.Sprintf("upload part %d of %d of %s", i+1, n, u.key), err))
				return
			}
			parts[i] = types.CompletedPart{ETag: out.ETag, PartNumber: num}
		}()
	}
	wg.Wait()
	return parts, first
}
