package cli

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Helpers for the Kafka sink's end-to-end tests: a kfake broker process
// (cmd/walcast-kfake, the tool `make kafka` runs), and two independent
// readers of what landed in Kafka — franz-go and Debian's kcat
// (librdkafka) — whose records are checked with the same verify as the
// webhook receiver's.

var (
	kfakeOnce sync.Once
	kfakeBin  string
	kfakeErr  error
)

// buildKfake builds cmd/walcast-kfake into binDir once per test binary.
func buildKfake(t testing.TB) string {
	t.Helper()
	kfakeOnce.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			kfakeErr = err
			return
		}
		out := filepath.Join(binDir, "walcast-kfake")
		cmd := exec.Command("go", "build", "-o", out, "./cmd/walcast-kfake")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			kfakeErr = fmt.Errorf("go build ./cmd/walcast-kfake: %v\n%s", err, b)
			return
		}
		kfakeBin = out
	})
	if kfakeErr != nil {
		t.Fatal(kfakeErr)
	}
	return kfakeBin
}

// startKafka runs a kfake broker on a free 127.0.0.1 port for the test and
// returns its address.
func startKafka(t testing.TB) string {
	t.Helper()
	bin := buildKfake(t)
	cmd := exec.Command(bin, "-ports", "0", "-default-partitions", "3", "-log-level", "warn")
	return startAnnounced(t, cmd, "walcast-kfake", regexp.MustCompile(`^listening on (.*)$`), 30*time.Second)
}

// kafkaConfig is the config block body of a kafka sink.
func kafkaConfig(addr string, eos bool, txnID string) string {
	s := fmt.Sprintf("    brokers = [%q]\n    eos = %v\n", addr, eos)
	if eos {
		s += fmt.Sprintf("    transactional_id = %q\n", txnID)
	}
	return s
}

// kafkaClient is a franz-go client for the test's own reads.
func kafkaClient(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// highWatermarks sums the end offsets of topic: every record ever written,
// committed, aborted or open. Progress only; zero while the topic is missing.
func highWatermarks(ctx context.Context, adm *kadm.Client, topic string) int64 {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			n += o.Offset
		}
	})
	return n
}

// kafkaRecord is one record as a reader saw it.
type kafkaRecord struct {
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   map[string]string
}

// readKafka reads topic from the start to its end (the high watermark when
// the call starts) with franz-go at the given isolation level. Commit and
// abort markers are fetched too, so that the end is reached even when a
// partition's log ends with one.
func readKafka(t testing.TB, addr, topic string, iso kgo.IsolationLevel) []kafkaRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(kafkaClient(t, addr))
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	targets, starts := map[int32]int64{}, map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			targets[o.Partition], starts[o.Partition] = o.Offset, kgo.NewOffset().AtStart()
		}
	})
	if len(targets) == 0 {
		return nil
	}
	cl := kafkaClient(t, addr,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: starts}),
		kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(), kgo.FetchMaxBytes(64<<20))
	var out []kafkaRecord
	for len(targets) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: still waiting for offsets %v: %v", topic, targets, ctx.Err())
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("read %s partition %d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= targets[r.Partition] {
				delete(targets, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			h := make(map[string]string, len(r.Headers))
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			out = append(out, kafkaRecord{Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: h})
		})
	}
	sortRecords(out)
	return out
}

// needKcat returns the path of kcat, failing the test with what to do when
// it is missing: the independent-client check is part of the contract, so
// it is never skipped.
func needKcat(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		hint := "run `make tools` (it runs apt-get install -y kcat) or install Debian's kcat package"
		if os.Getenv("CI") == "true" {
			t.Fatalf("kcat not found in CI: the Makefile's tools step should have installed it; %s", hint)
		}
		t.Fatalf("kcat not found: the Kafka tests check what a read_committed librdkafka client sees with it; %s", hint)
	}
	return path
}

// readKcat reads topic with kcat as a read_committed consumer, from the
// beginning to the end of every partition; extra are more kcat flags (-Z:
// a null value is read as nil, not as an empty one).
func readKcat(t testing.TB, addr, topic string, extra ...string) []kafkaRecord {
	t.Helper()
	kcat := needKcat(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"-C", "-b", addr, "-t", topic, "-o", "beginning", "-e", "-J", "-q",
		"-X", "isolation.level=read_committed"}, extra...)
	cmd := exec.CommandContext(ctx, kcat, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, stderr.Bytes())
	}
	var recs []kafkaRecord
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m struct {
			Partition int32    `json:"partition"`
			Offset    int64    `json:"offset"`
			Headers   []string `json:"headers"` // name, value, name, value...
			Key       *string  `json:"key"`
			Payload   *string  `json:"payload"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("kcat output line %q: %v", sc.Text(), err)
		}
		r := kafkaRecord{Partition: m.Partition, Offset: m.Offset, Headers: map[string]string{}}
		if m.Key != nil {
			r.Key = []byte(*m.Key)
		}
		if m.Payload != nil {
			r.Value = []byte(*m.Payload)
		}
		for i := 0; i+1 < len(m.Headers); i += 2 {
			r.Headers[m.Headers[i]] = m.Headers[i+1]
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	sortRecords(recs)
	return recs
}

// sortRecords orders records by partition, then offset: a row always lands
// in one partition, so this order keeps every row's history in log order,
// which is what verify checks.
func sortRecords(rs []kafkaRecord) {
	slices.SortFunc(rs, func(a, b kafkaRecord) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
}

// asReceived turns records into what verify compares against the ground
// truth, checking on the way that the key and headers agree with the
// envelope.
func asReceived(t testing.TB, rs []kafkaRecord) []received {
	t.Helper()
	out := make([]received, 0, len(rs))
	for _, r := range rs {
		if r.Headers["walcast-derived"] != "" {
			// A tombstone or an old key's delete: records that follow
			// from an event (README, Kafka sink), not events themselves.
			continue
		}
		e, err := decodeEnvelope(r.Value)
		if err != nil {
			t.Fatalf("partition %d offset %d: value is not an envelope: %v: %.200s", r.Partition, r.Offset, err, r.Value)
		}
		ev, err := e.received(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if r.Headers["walcast-id"] != e.ID || r.Headers["walcast-op"] != e.Op || r.Headers["walcast-table"] != e.Schema+"."+e.Table {
			t.Fatalf("event %s: headers %v disagree with the envelope", e.ID, r.Headers)
		}
		var rkey bytes.Buffer
		json.Compact(&rkey, r.Key)
		wantKey := ev.Key
		if wantKey == "null" {
			// Truncates and keyless rows are keyed by their event id.
			wantKey = fmt.Sprintf(`{"walcast_id":%q}`, e.ID)
		}
		if wantKey != rkey.String() {
			t.Fatalf("event %s: record key %s, envelope key %s", e.ID, r.Key, e.Key)
		}
		out = append(out, ev)
	}
	return out
}
