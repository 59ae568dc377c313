package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/walcast/walcast/pluginkit"
)

// Helpers for the s3 sink's end-to-end tests: gofakes3, an S3 API server,
// on 127.0.0.1 in the test process behind a handler that checks the access
// key and can throttle or drop uploads; and the independent readers of
// what it stores: boto3 (Debian's python3-boto3) lists and fetches every
// object over the S3 API, the zstd and gzip commands decompress JSON
// lines, and hyparquet (npm) reads Parquet.

const (
	s3Bucket    = "lake"
	s3AccessKey = "walcast-test"
	s3Secret    = "walcast-test-secret"
)

// s3Server is a gofakes3 server for one test.
type s3Server struct {
	URL     string
	backend *s3mem.Backend
	// slowDown, while positive, is how many more requests are answered
	// 503 SlowDown; dropUploads cuts data uploads mid-body while set.
	slowDown    atomic.Int64
	dropUploads atomic.Bool
	throttled   atomic.Int64 // requests answered 503
	dropped     atomic.Int64 // uploads cut
}

// startS3 serves gofakes3 with bucket s3Bucket on a free 127.0.0.1 port.
// gofakes3 checks no signature, so the handler in front of it refuses
// every request signed with another access key than s3AccessKey the way
// S3 does (403 InvalidAccessKeyId); it does not verify the signature
// itself, so a wrong secret with the right key goes through.
func startS3(t testing.TB) *s3Server {
	t.Helper()
	s := &s3Server{backend: s3mem.New()}
	if err := s.backend.CreateBucket(s3Bucket); err != nil {
		t.Fatal(err)
	}
	inner := gofakes3.New(s.backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()
	s.URL = serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(inner, w, r)
	}))
	return s
}

var credentialRe = regexp.MustCompile(`Credential=([^/]+)/`)

func (s *s3Server) serve(inner http.Handler, w http.ResponseWriter, r *http.Request) {
	if m := credentialRe.FindStringSubmatch(r.Header.Get("Authorization")); m == nil || m[1] != s3AccessKey {
		s3Error(w, http.StatusForbidden, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")
		return
	}
	if s.slowDown.Add(-1) >= 0 {
		s.throttled.Add(1)
		s3Error(w, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
		return
	}
	data := r.Method == http.MethodPut && !strings.Contains(r.URL.Path, "/_walcast/")
	if data && s.dropUploads.Load() {
		s.dropped.Add(1)
		io.CopyN(io.Discard, r.Body, 100)
		panic(http.ErrAbortHandler) // the connection is cut mid-upload
	}
	inner.ServeHTTP(w, r)
}

func s3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message><RequestId>test</RequestId></Error>`, code, msg)
}

// objectCount is how many objects the server holds under prefix: progress
// only (the checks read through boto3).
func (s *s3Server) objectCount(prefix string) int {
	res, err := s.backend.ListBucket(s3Bucket, &gofakes3.Prefix{Prefix: prefix, HasPrefix: true}, gofakes3.ListBucketPage{})
	if err != nil {
		return 0
	}
	return len(res.Contents)
}

// checkpoint reads a sink's checkpoint object straight from the store
// (zero when there is none).
func (s *s3Server) checkpoint(t testing.TB, key string) pluginkit.EventID {
	t.Helper()
	obj, err := s.backend.GetObject(s3Bucket, key, nil)
	if err != nil {
		return pluginkit.EventID{}
	}
	defer obj.Contents.Close()
	var doc struct{ Checkpoint string }
	if err := json.NewDecoder(obj.Contents).Decode(&doc); err != nil {
		t.Fatalf("checkpoint object %s: %v", key, err)
	}
	id, err := pluginkit.ParseEventID(doc.Checkpoint)
	if err != nil {
		t.Fatalf("checkpoint object %s: %v", key, err)
	}
	return id
}

// s3SinkConfig is the config block body of an s3 sink on srv; extra lines
// are appended. Credentials come from the sink's env attribute (see
// s3Credentials), the SDK's standard source.
func s3SinkConfig(srv *s3Server, prefix, extra string) string {
	return fmt.Sprintf("    bucket = %q\n    prefix = %q\n    endpoint = %q\n    path_style = true\n    region = \"us-east-1\"\n%s",
		s3Bucket, prefix, srv.URL, extra)
}

// s3Credentials gives the sink with id in pipeline file path the test
// credentials as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, through the
// sink's env attribute: how a user passes the SDK's environment source to
// a plugin, which inherits none of walcast's environment.
func s3Credentials(t testing.TB, path, id string) {
	t.Helper()
	editPipeline(t, path, fmt.Sprintf("sink \"s3\" %q {\n", id), fmt.Sprintf(
		"sink \"s3\" %q {\n  env = { AWS_ACCESS_KEY_ID = %q, AWS_SECRET_ACCESS_KEY = %q }\n", id, s3AccessKey, s3Secret))
}

// s3Object is one object as boto3 listed and fetched it.
type s3Object struct {
	Key  string            `json:"key"`
	Size int64             `json:"size"`
	Meta map[string]string `json:"meta"`
	File string            `json:"file"` // where its bytes were saved
}

// boto3Script lists every object of the bucket under a prefix with
// ListObjectsV2 (paginated) and fetches each with GetObject into a
// directory, printing one JSON line per object; then it prints the
// multipart uploads left open.
const boto3Script = `
import json, os, sys, boto3
from botocore.config import Config
endpoint, bucket, prefix, out = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
    aws_access_key_id=os.environ["KEY"], aws_secret_access_key=os.environ["SECRET"],
    config=Config(s3={"addressing_style": "path"}))
n = 0
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
    for o in page.get("Contents", []):
        got = s3.get_object(Bucket=bucket, Key=o["Key"])
        body = got["Body"].read()
        if len(body) != o["Size"]:
            sys.exit("%s: listed %d bytes, read %d" % (o["Key"], o["Size"], len(body)))
        path = os.path.join(out, str(n)); n += 1
        with open(path, "wb") as f:
            f.write(body)
        print(json.dumps({"key": o["Key"], "size": o["Size"], "meta": {k.lower(): v for k, v in got.get("Metadata", {}).items()}, "file": path}))
try:
    ups = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
except s3.exceptions.NoSuchUpload:
    ups = []  # gofakes3 answers a listing with no upload so
print(json.dumps({"open_uploads": len(ups)}))
`

// needS3Clients fails the test with what to do when the independent
// clients are missing: they are the point of the check, never skipped.
func needS3Clients(t testing.TB) {
	t.Helper()
	var missing []string
	if err := exec.Command("/usr/bin/python3", "-c", "import boto3").Run(); err != nil {
		missing = append(missing, "python3-boto3 (Debian)")
	}
	if _, err := exec.LookPath("zstd"); err != nil {
		missing = append(missing, "zstd (Debian)")
	}
	if _, err := os.Stat(hyparquetDir()); err != nil {
		missing = append(missing, "hyparquet (npm, into .tools/npm)")
	}
	if len(missing) > 0 {
		t.Fatalf("missing the independent S3 and Parquet clients %v: run `make tools` (as root or with sudo)", missing)
	}
}

// readBucket lists and fetches every object under prefix with boto3.
func readBucket(t testing.TB, srv *s3Server, prefix string) []s3Object {
	t.Helper()
	needS3Clients(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", boto3Script, srv.URL, s3Bucket, prefix, dir)
	cmd.Env = append(os.Environ(), "KEY="+s3AccessKey, "SECRET="+s3Secret)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("boto3: %v\n%s", err, stderr.Bytes())
	}
	var objs []s3Object
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `{"open_uploads"`) {
			var u struct {
				OpenUploads int `json:"open_uploads"`
			}
			json.Unmarshal(sc.Bytes(), &u)
			if u.OpenUploads != 0 {
				t.Errorf("%d multipart uploads left open under %s", u.OpenUploads, prefix)
			}
			continue
		}
		var o s3Object
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("boto3 output %q: %v", sc.Text(), err)
		}
		objs = append(objs, o)
	}
	return objs
}

// s3Stored is an event as read from an object.
type s3Stored struct {
	received
	Object string // its object's key
}

// jsonlEvents decodes every JSON lines object (plain, .gz with the gzip
// command, .zst with the zstd command) and returns each event with its object, in
// key order then line order. An object that does not decode whole, whose
// line count is not the count its metadata gives, or whose events are not
// of its table, or not within its key's first and last id, fails the test:
// no object may be partial or unreadable.
func jsonlEvents(t testing.TB, objs []s3Object) []s3Stored {
	t.Helper()
	var out []s3Stored
	for _, o := range objs {
		if strings.Contains(o.Key, "/_walcast/") {
			continue
		}
		raw, err := os.ReadFile(o.File)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(o.Key, ".jsonl.gz"):
			cmd := exec.Command("gzip", "-dc")
			cmd.Stdin = bytes.NewReader(raw)
			if raw, err = cmd.Output(); err != nil {
				t.Fatalf("object %s: gzip -dc: %v", o.Key, err)
			}
		case strings.HasSuffix(o.Key, ".jsonl.zst"):
			cmd := exec.Command("zstd", "-dc")
			cmd.Stdin = bytes.NewReader(raw)
			if raw, err = cmd.Output(); err != nil {
				t.Fatalf("object %s: zstd -dc: %v", o.Key, err)
			}
		case !strings.HasSuffix(o.Key, ".jsonl"):
			t.Fatalf("object %s: not a JSON lines object", o.Key)
		}
		out = append(out, objectEvents(t, o, raw)...)
	}
	return out
}

// objectEvents checks one decoded JSON lines object and returns its events.
func objectEvents(t testing.TB, o s3Object, raw []byte) []s3Stored {
	t.Helper()
	if len(raw) == 0 || raw[len(raw)-1] != '\n' {
		t.Fatalf("object %s does not end with a whole line", o.Key)
	}
	first, last := keyRange(t, o.Key)
	var out []s3Stored
	for _, line := range bytes.Split(raw[:len(raw)-1], []byte("\n")) {
		e, err := decodeEnvelope(line)
		if err != nil {
			t.Fatalf("object %s: line %.120s: %v", o.Key, line, err)
		}
		r, err := e.received(bytes.Clone(line))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(o.Key, "/"+e.Schema+"."+e.Table+"/") || r.ID.Compare(first) < 0 || r.ID.Compare(last) > 0 {
			t.Fatalf("object %s holds event %s of %s.%s", o.Key, r.ID, e.Schema, e.Table)
		}
		out = append(out, s3Stored{received: r, Object: o.Key})
	}
	if n, _ := strconv.Atoi(o.Meta["walcast-events"]); n != len(out) {
		t.Fatalf("object %s holds %d events, its metadata says %s (%v)", o.Key, len(out), o.Meta["walcast-events"], o.Meta)
	}
	if out[0].ID != first || out[len(out)-1].ID != last {
		t.Fatalf("object %s starts at %s and ends at %s", o.Key, out[0].ID, out[len(out)-1].ID)
	}
	return out
}

var objectName = regexp.MustCompile(`/([0-9A-F]{16})-(\d{10,})_([0-9A-F]{16})-(\d{10,})\.[a-z.]+$`)

// keyRange reads the first and last event id from an object's key, as
// docs/sinks.md describes it.
func keyRange(t testing.TB, key string) (first, last pluginkit.EventID) {
	t.Helper()
	m := objectName.FindStringSubmatch(key)
	if m == nil {
		t.Fatalf("object key %s is not <first id>_<last id>.<ext>", key)
	}
	id := func(lsn, idx string) pluginkit.EventID {
		l, _ := strconv.ParseUint(lsn, 16, 64)
		i, _ := strconv.ParseUint(idx, 10, 64)
		return pluginkit.EventID{CommitLSN: l, Index: i}
	}
	return id(m[1], m[2]), id(m[3], m[4])
}

// inIDOrder sorts stored events by id, copies of one event by object key.
func inIDOrder(evs []s3Stored) []s3Stored {
	out := slices.Clone(evs)
	slices.SortStableFunc(out, func(a, b s3Stored) int {
		if c := a.ID.Compare(b.ID); c != 0 {
			return c
		}
		return strings.Compare(a.Object, b.Object)
	})
	return out
}

func receivedOf(evs []s3Stored) []received {
	out := make([]received, len(evs))
	for i, e := range evs {
		out[i] = e.received
	}
	return out
}

// s3Truth reads the test_decoding slot as truth does, and also knows an
// update that changed the key: test_decoding prints its old key and new
// tuple, and the envelope's key is the new one.
func s3Truth(t testing.TB, db *pgx.Conn, slot string, tables map[string]bool) []change {
	t.Helper()
	out := truth(t, db, slot, tables)
	rows, err := db.Query(context.Background(),
		`SELECT data FROM pg_logical_slot_peek_changes($1, NULL, NULL, 'include-xids', '1', 'skip-empty-xacts', '1')`, slot)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	// truth leaves a key change's key "null"; the new tuple's id, in the
	// same order, fills them in.
	var newKeys []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		if m := keyChange.FindStringSubmatch(line); m != nil && tables[m[1]] {
			newKeys = append(newKeys, `{"id":`+m[2]+`}`)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range out {
		if out[i].Op == "update" && out[i].Key == "null" {
			if n >= len(newKeys) {
				t.Fatalf("more key changes than new tuples in the truth slot")
			}
			out[i].Key = newKeys[n]
			n++
		}
	}
	return out
}

var keyChange = regexp.MustCompile(`^table ([^ ]+): UPDATE: old-key: .* new-tuple: id\[[a-z]+\]:(-?\d+)`)

// s3Mirror applies events in id order, once each, to in-memory copies of
// (id int, v int) tables: an update that changed the key moves the row
// (its old key is in old), a truncate empties the table.
func s3Mirror(t testing.TB, evs []s3Stored) mirror {
	t.Helper()
	m := mirror{}
	var last pluginkit.EventID
	for i, e := range evs {
		if i > 0 && e.ID == last {
			continue
		}
		last = e.ID
		var ev struct {
			New *struct{ ID, V int } `json:"new"`
			Old *struct{ ID int }    `json:"old"`
			Key *struct{ ID int }    `json:"key"`
		}
		if err := json.Unmarshal(e.Raw, &ev); err != nil {
			t.Fatalf("event %s: %v", e.ID, err)
		}
		tb := m[e.Table]
		if tb == nil {
			tb = map[int]int{}
			m[e.Table] = tb
		}
		switch e.Op {
		case "insert", "read":
			tb[ev.New.ID] = ev.New.V
		case "update":
			if ev.Old != nil {
				delete(tb, ev.Old.ID)
			}
			tb[ev.New.ID] = ev.New.V
		case "delete":
			delete(tb, ev.Key.ID)
		case "truncate":
			clear(tb)
		}
	}
	return m
}

// hyparquetDir is where `make tools` installs the npm packages.
func hyparquetDir() string {
	root, _ := filepath.Abs("../..")
	return filepath.Join(root, ".tools", "npm", "node_modules", "hyparquet")
}

// hyparquetScript prints, for each Parquet file named on the command line,
// one JSON line: its schema as hyparquet reads it from the footer, and
// its rows as objects. INT64 values come back as BigInt and are printed
// as {"int64":"<digits>"}, timestamps as {"micros":"<digits>"}, JSON
// columns as their text {"json":"<text>"}, so that nothing is rounded by
// JavaScript's numbers on the way.
const hyparquetScript = `
import { parquetMetadata, parquetSchema, parquetReadObjects } from 'hyparquet'
import { readFileSync } from 'node:fs'
for (const path of process.argv.slice(2)) {
  const buf = readFileSync(path)
  const file = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength)
  const metadata = parquetMetadata(file)
  const walk = (n, prefix) => n.children.flatMap(c => {
    const name = prefix + c.element.name
    const el = c.element
    const me = { name, type: el.type ?? null, logical: el.logical_type?.type ?? el.converted_type ?? null,
      unit: el.logical_type?.unit ?? null, utc: el.logical_type?.isAdjustedToUTC ?? null, repetition: el.repetition_type }
    return c.children.length ? [me, ...walk(c, name + '.')] : [me]
  })
  const rows = await parquetReadObjects({ file, metadata, parsers: {
    timestampFromMicroseconds: v => ({ micros: v.toString() }),
    jsonFromBytes: b => b && ({ json: new TextDecoder().decode(b) }),
  } })
  const out = JSON.stringify({ path, schema: walk(parquetSchema(metadata), ''), rows },
    (k, v) => typeof v === 'bigint' ? { int64: v.toString() } : v)
  process.stdout.write(out + '\n')
}
`

// parquetFile is one Parquet object as hyparquet read it.
type parquetFile struct {
	Path   string `json:"path"`
	Schema []struct {
		Name       string  `json:"name"`
		Type       *string `json:"type"`
		Logical    *string `json:"logical"`
		Unit       any     `json:"unit"`
		UTC        *bool   `json:"utc"`
		Repetition string  `json:"repetition"`
	} `json:"schema"`
	Rows []map[string]json.RawMessage `json:"rows"`
}

// readParquet reads files with hyparquet (node), a reader that shares no
// code with the sink's parquet-go.
func readParquet(t testing.TB, files []string) []parquetFile {
	t.Helper()
	needS3Clients(t)
	// An ES module resolves 'hyparquet' from its own directory upwards, so
	// the script goes where node_modules is found: NODE_PATH does not
	// apply to import.
	script := filepath.Join(filepath.Dir(filepath.Dir(hyparquetDir())), fmt.Sprintf("walcast-test-%d.mjs", os.Getpid()))
	if err := os.WriteFile(script, []byte(hyparquetScript), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(script) })
	var out []parquetFile
	for chunk := range slices.Chunk(files, 200) {
		cmd := exec.Command("node", append([]string{script}, chunk...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		raw, err := cmd.Output()
		if err != nil {
			t.Fatalf("hyparquet: %v\n%s", err, stderr.Bytes())
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		for dec.More() {
			var f parquetFile
			if err := dec.Decode(&f); err != nil {
				t.Fatalf("hyparquet output: %v", err)
			}
			out = append(out, f)
		}
	}
	if len(out) != len(files) {
		t.Fatalf("hyparquet read %d of %d files", len(out), len(files))
	}
	return out
}
