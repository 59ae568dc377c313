package bench

import (
	"fmt"
	"net"
	"net/http"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// The s3 sink's paths drain into gofakes3, an S3 API server kept in
// memory, served by this process on 127.0.0.1 (as kfake stands in for
// Kafka): the figures are the sink's and walcast's, with an object store
// that answers at once.

const s3BenchBucket = "bench"

// startFakeS3 serves gofakes3 with one bucket on a free port of
// 127.0.0.1 and returns its URL and how to stop it.
func startFakeS3() (string, func(), error) {
	backend := s3mem.New()
	if err := backend.CreateBucket(s3BenchBucket); err != nil {
		return "", nil, fmt.Errorf("create bucket: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()}
	go srv.Serve(l)
	return "http://" + l.Addr().String(), func() { srv.Close() }, nil
}

// s3Sink is the sink block of an s3 path writing format to url.
func s3Sink(url, format string) string {
	return fmt.Sprintf(`sink "s3" "lake" {
  config {
    bucket            = %q
    endpoint          = %q
    path_style        = true
    region            = "us-east-1"
    access_key_id     = "bench"
    secret_access_key = "bench"
    format            = %q
  }
}`, s3BenchBucket, url, format)
}
