package main

import (
	"cmp"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/clienttls"
)

const (
	// defaultBatchSize is the batch size the sink asks the host for when the
	// pipeline sets none: the most the host allows, since every object is a
	// request with a fixed cost and a query engine prefers few large files
	// to many small ones. The host also caps a batch at 16 MiB.
	defaultBatchSize = 10000
	// minPartSize is S3's smallest multipart part but the last.
	minPartSize = 5 << 20
	// maxPartSize is S3's largest part.
	maxPartSize           = 5 << 30
	defaultPartSize       = 8 << 20
	defaultMultipartAbove = 16 << 20
)

// configFields declares the config block. Nested settings are string maps
// (`tls = { ca_file = "..." }`), as in the kafka sink, because that is what
// the host's config decoding offers; their keys are checked here.
var configFields = []pluginkit.ConfigField{
	{Name: "bucket", Type: pluginkit.TypeString, Required: true, Doc: "The bucket objects go to. It must exist: the sink never creates it."},
	{Name: "prefix", Type: pluginkit.TypeString, Doc: `Key prefix: objects are "<prefix>/<schema>.<table>/date=YYYY-MM-DD/<first id>_<last id>.<ext>". Default: none.`},
	{Name: "endpoint", Type: pluginkit.TypeString, Doc: `S3-compatible endpoint, "http(s)://host[:port]" (MinIO, Ceph, R2, GCS). Default: AWS S3 for the region.`},
	{Name: "region", Type: pluginkit.TypeString, Doc: `Region. Default: the SDK's (AWS_REGION, the shared config's profile), else "us-east-1".`},
	{Name: "path_style", Type: pluginkit.TypeBool, Doc: "true: http://host/bucket/key addressing, which most S3-compatible stores need. Default false: http://bucket.host/key."},
	{Name: "tls", Type: pluginkit.TypeStringMap, Doc: "TLS to an https endpoint: ca_file, cert_file, key_file, server_name, insecure_skip_verify. Default: the system's roots."},
	{Name: "profile", Type: pluginkit.TypeString, Doc: "Shared config profile (~/.aws/config, ~/.aws/credentials) to take credentials and region from."},
	{Name: "access_key_id", Type: pluginkit.TypeString, Doc: `Static credentials, e.g. env("MINIO_USER"); with secret_access_key. Default: the SDK's chain (environment, shared config, web identity, container and instance roles).`},
	{Name: "secret_access_key", Type: pluginkit.TypeString, Doc: "Secret of access_key_id."},
	{Name: "session_token", Type: pluginkit.TypeString, Doc: "Session token of temporary static credentials."},
	{Name: "format", Type: pluginkit.TypeString, Doc: `"jsonl" (default): one envelope per line. "parquet": one row per event, Snappy-compressed columns.`},
	{Name: "compression", Type: pluginkit.TypeString, Doc: `JSON lines only: "none" (default), "gzip" (.jsonl.gz) or "zstd" (.jsonl.zst).`},
	{Name: "max_object_bytes", Type: pluginkit.TypeNumber, Doc: "Split a batch's events of one table and date into several objects above this many bytes of envelopes (at least 1024). Default 0: one object per batch, table and date (a batch holds at most 16 MiB)."},
	{Name: "multipart_threshold", Type: pluginkit.TypeNumber, Doc: "Objects larger than this many bytes go up as a multipart upload, smaller ones in one PUT. Default 16777216 (16 MiB), at least part_size."},
	{Name: "part_size", Type: pluginkit.TypeNumber, Doc: "Part size of a multipart upload, 5242880 (5 MiB) to 5368709120 (5 GiB). Default 8388608 (8 MiB)."},
	{Name: "checkpoint_key", Type: pluginkit.TypeString, Doc: `Key of this sink's checkpoint object. Default "<prefix>/_walcast/<pipeline>.<sink id>.checkpoint.json". Unique per sink and never changed.`},
}

// config is the JSON the host sends, as written in the pipeline.
type config struct {
	Bucket             string            `json:"bucket"`
	Prefix             string            `json:"prefix"`
	Endpoint           string            `json:"endpoint"`
	Region             string            `json:"region"`
	PathStyle          bool              `json:"path_style"`
	TLS                map[string]string `json:"tls"`
	Profile            string            `json:"profile"`
	AccessKeyID        string            `json:"access_key_id"`
	SecretAccessKey    string            `json:"secret_access_key"`
	SessionToken       string            `json:"session_token"`
	Format             string            `json:"format"`
	Compression        string            `json:"compression"`
	MaxObjectBytes     *int64            `json:"max_object_bytes"`
	MultipartThreshold *int64            `json:"multipart_threshold"`
	PartSize           *int64            `json:"part_size"`
	CheckpointKey      string            `json:"checkpoint_key"`
}

// settings is the validated config.
type settings struct {
	bucket    string
	prefix    string // without leading or trailing "/"; may be empty
	endpoint  string // empty: AWS for the region
	region    string
	pathStyle bool
	tls       *tls.Config // nil: Go's defaults
	profile   string
	accessKey string
	secretKey string
	token     string

	format      format
	compression compression

	maxObjectBytes int64 // 0: no limit of the sink's own
	multipartAbove int64
	partSize       int64
	checkpointKey  string
}

func decodeConfig(raw json.RawMessage, id pluginkit.Identity) (settings, error) {
	var c config
	if err := pluginkit.DecodeConfig(raw, &c); err != nil {
		return settings{}, err
	}
	st := settings{
		bucket:         c.Bucket,
		prefix:         strings.Trim(c.Prefix, "/"),
		region:         c.Region,
		pathStyle:      c.PathStyle,
		profile:        c.Profile,
		accessKey:      c.AccessKeyID,
		secretKey:      c.SecretAccessKey,
		token:          c.SessionToken,
		multipartAbove: defaultMultipartAbove,
		partSize:       defaultPartSize,
	}
	for _, step := range []func() error{
		func() error { return parseBucket(&st, c.Bucket) },
		func() error { return parseEndpoint(&st, c.Endpoint) },
		func() error { return parseCredentials(&st) },
		func() error { return parseFormat(&st, c.Format, c.Compression) },
		func() error { return parseSizes(&st, c) },
		func() (err error) { st.tls, err = clienttls.Decode(c.TLS, clienttls.Settings); return err },
	} {
		if err := step(); err != nil {
			return st, err
		}
	}
	st.checkpointKey = checkpointKey(c.CheckpointKey, st.prefix, id)
	return st, nil
}

func parseBucket(st *settings, bucket string) error {
	if bucket == "" {
		return &pluginkit.ConfigError{Field: "bucket", Msg: "is required: the name of an existing bucket"}
	}
	if strings.ContainsAny(bucket, "/ ") {
		return &pluginkit.ConfigError{Field: "bucket", Msg: fmt.Sprintf("%q is a bucket name, not a path or URL: put the key prefix in prefix and the server in endpoint", bucket)}
	}
	return nil
}

func parseEndpoint(st *settings, endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &pluginkit.ConfigError{Field: "endpoint", Msg: fmt.Sprintf(`%q: want "http://host[:port]" or "https://host[:port]"`, endpoint)}
	}
	if u.User != nil {
		return &pluginkit.ConfigError{Field: "endpoint", Msg: "must not hold credentials: use access_key_id and secret_access_key, or the SDK's sources"}
	}
	st.endpoint = strings.TrimSuffix(endpoint, "/")
	return nil
}

func parseCredentials(st *settings) error {
	if (st.accessKey == "") != (st.secretKey == "") {
		return &pluginkit.ConfigError{Field: "access_key_id", Msg: "access_key_id and secret_access_key go together"}
	}
	if st.token != "" && st.accessKey == "" {
		return &pluginkit.ConfigError{Field: "session_token", Msg: "needs access_key_id and secret_access_key"}
	}
	if st.profile != "" && st.accessKey != "" {
		return &pluginkit.ConfigError{Field: "profile", Msg: "set either profile or static credentials (access_key_id), not both"}
	}
	return nil
}

func parseFormat(st *settings, f, c string) error {
	switch strings.ToLower(cmp.Or(f, "jsonl")) {
	case "jsonl":
		st.format = formatJSONL
	case "parquet":
		st.format = formatParquet
	default:
		return &pluginkit.ConfigError{Field: "format", Msg: fmt.Sprintf(`%q: want "jsonl" or "parquet"`, f)}
	}
	switch strings.ToLower(cmp.Or(c, "none")) {
	case "none":
		st.compression = compressNone
	case "gzip":
		st.compression = compressGzip
	case "zstd":
		st.compression = compressZstd
	default:
		return &pluginkit.ConfigError{Field: "compression", Msg: fmt.Sprintf(`%q: want "none", "gzip" or "zstd"`, c)}
	}
	if st.format == formatParquet && st.compression != compressNone {
		return &pluginkit.ConfigError{Field: "compression", Msg: "applies to format = \"jsonl\" only: Parquet objects compress their columns with Snappy"}
	}
	return nil
}

func parseSizes(st *settings, c config) error {
	if n := c.MaxObjectBytes; n != nil {
		if *n != 0 && *n < 1024 {
			return &pluginkit.ConfigError{Field: "max_object_bytes", Msg: fmt.Sprintf("must be 0 (no limit) or at least 1024, not %d", *n)}
		}
		st.maxObjectBytes = *n
	}
	if n := c.PartSize; n != nil {
		if *n < minPartSize || *n > maxPartSize {
			return &pluginkit.ConfigError{Field: "part_size", Msg: fmt.Sprintf("must be between %d (5 MiB, S3's smallest part) and %d (5 GiB), not %d", minPartSize, int64(maxPartSize), *n)}
		}
		st.partSize = *n
	}
	if n := c.MultipartThreshold; n != nil {
		if *n < st.partSize {
			return &pluginkit.ConfigError{Field: "multipart_threshold", Msg: fmt.Sprintf("must be at least part_size (%d), not %d", st.partSize, *n)}
		}
		st.multipartAbove = *n
	} else {
		st.multipartAbove = max(st.multipartAbove, st.partSize)
	}
	return nil
}

// checkpointKey is the key of the sink's checkpoint object. The default
// follows the pipeline and sink names, which the host passes and which stay
// stable across restarts; it lies under "_walcast/", a name query engines
// skip (Hive, Spark, Trino and DuckDB's hive partitioning ignore paths
// starting with "_"), beside the tables' directories.
func checkpointKey(set, prefix string, id pluginkit.Identity) string {
	if set != "" {
		return strings.TrimPrefix(set, "/")
	}
	name := "walcast." + cmp.Or(id.SinkID, "s3")
	if id.Pipeline != "" {
		name = id.Pipeline + "." + cmp.Or(id.SinkID, "s3")
	}
	return joinKey(prefix, "_walcast", pathSafe(name)+".checkpoint.json")
}
