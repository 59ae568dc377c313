package main

import (
	"bytes"
	"fmt"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// jsonlEncoder writes an object as JSON lines: each envelope exactly as the
// host encoded it, then "\n", the whole optionally compressed as one gzip
// member or one zstd frame.
type jsonlEncoder struct {
	compression compression
	zstd        *zstd.Encoder // shared: EncodeAll is safe for concurrent use
}

func newJSONLEncoder(c compression) (*jsonlEncoder, error) {
	enc := &jsonlEncoder{compression: c}
	if c == compressZstd {
		z, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("create zstd encoder: %w", err)
		}
		enc.zstd = z
	}
	return enc, nil
}

func (j *jsonlEncoder) contentType() string {
	switch j.compression {
	case compressGzip:
		return "application/gzip"
	case compressZstd:
		return "application/zstd"
	}
	return "application/x-ndjson"
}

func (j *jsonlEncoder) encode(o *object) ([]byte, error) {
	raw := make([]byte, 0, o.bytes+int64(len(o.events)))
	for i := range o.events {
		raw = append(raw, o.events[i].Payload...)
		raw = append(raw, '\n')
	}
	switch j.compression {
	case compressGzip:
		var b bytes.Buffer
		b.Grow(len(raw) / 4)
		w := gzip.NewWriter(&b)
		if _, err := w.Write(raw); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return b.Bytes(), nil
	case compressZstd:
		return j.zstd.EncodeAll(raw, make([]byte, 0, len(raw)/4)), nil
	}
	return raw, nil
}
