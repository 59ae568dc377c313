package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// The object layout: which events go into which object, and its key.
//
//	<prefix>/<schema>.<table>/date=YYYY-MM-DD/<first id>_<last id>.<ext>
//
// A key follows only from the events an object holds, so writing the same
// events again overwrites the object instead of adding one.

type format int

const (
	formatJSONL format = iota
	formatParquet
)

type compression int

const (
	compressNone compression = iota
	compressGzip
	compressZstd
)

// ext is the file name extension of an object.
func ext(f format, c compression) string {
	if f == formatParquet {
		return "parquet"
	}
	switch c {
	case compressGzip:
		return "jsonl.gz"
	case compressZstd:
		return "jsonl.zst"
	}
	return "jsonl"
}

// pathSafe percent-encodes every byte of s outside [A-Za-z0-9._-] (as Hive
// escapes partition values), so that a schema or table name holding "/",
// "=", spaces or non-ASCII characters stays one path segment and two names
// never share one.
func pathSafe(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// keyID writes an event id the way it appears in a key: the commit LSN as
// 16 upper-case hex digits, "-", the index as at least 10 decimal digits.
// "0/1A2B3C8:5" becomes "0000000001A2B3C8-0000000005". Unlike the id's own
// form it holds no "/" or ":", and keys of one directory sort by name in
// id order (for indexes below 10^10).
func keyID(id pluginkit.EventID) string {
	return fmt.Sprintf("%016X-%010d", id.CommitLSN, id.Index)
}

// parseKeyID reverses keyID.
func parseKeyID(s string) (pluginkit.EventID, error) {
	lsn, idx, ok := strings.Cut(s, "-")
	if !ok || len(lsn) != 16 {
		return pluginkit.EventID{}, fmt.Errorf("%q is not <16 hex digits>-<index>", s)
	}
	l, err := strconv.ParseUint(lsn, 16, 64)
	if err != nil {
		return pluginkit.EventID{}, fmt.Errorf("%q: commit LSN: %w", s, err)
	}
	i, err := strconv.ParseUint(idx, 10, 64)
	if err != nil {
		return pluginkit.EventID{}, fmt.Errorf("%q: index: %w", s, err)
	}
	return pluginkit.EventID{CommitLSN: l, Index: i}, nil
}

// joinKey joins key segments with "/", leaving out empty ones (an unset
// prefix).
func joinKey(parts ...string) string {
	out := parts[:0:0]
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "/")
}

// object is one object to write: events of one table and one commit date,
// in id order.
type object struct {
	schema, table string
	date          string // YYYY-MM-DD, UTC
	events        []pluginkit.Event
	idx           []int       // each event's index in its batch
	times         []time.Time // each event's commit time
	bytes         int64       // sum of the envelopes' sizes
}

func (o *object) first() pluginkit.EventID { return o.events[0].ID }
func (o *object) last() pluginkit.EventID  { return o.events[len(o.events)-1].ID }

// key is the object's key under prefix.
func (o *object) key(prefix, extension string) string {
	return joinKey(prefix, pathSafe(o.schema)+"."+pathSafe(o.table), "date="+o.date,
		keyID(o.first())+"_"+keyID(o.last())+"."+extension)
}

// commitTime reads an envelope's commit_time.
func commitTime(e *pluginkit.Event) (time.Time, error) {
	raw, ok := e.Member("commit_time")
	if !ok || len(raw) < 2 || raw[0] != '"' {
		return time.Time{}, fmt.Errorf("event %s: envelope has no commit_time string", e.ID)
	}
	t, err := time.Parse(time.RFC3339Nano, string(raw[1:len(raw)-1]))
	if err != nil {
		return time.Time{}, fmt.Errorf("event %s: commit_time: %w", e.ID, err)
	}
	return t.UTC(), nil
}

// cut splits the events at the indexes pick (in id order) into objects:
// one per table and commit date (UTC), in order of their first event, each
// split further so that none holds more than maxBytes of envelopes (0: no
// limit) unless a single event is larger. The result depends on the events
// only: the same events always give the same objects, hence the same keys.
//
// An event whose envelope has no readable commit_time is left out and
// returned in refused, by index, as a permanent failure.
func cut(events []pluginkit.Event, pick []int, maxBytes int64) (objs []*object, refused map[int]error) {
	type group struct{ schema, table, date string }
	open := map[group]*object{}
	refused = map[int]error{}
	for _, i := range pick {
		e := &events[i]
		ct, err := commitTime(e)
		if err != nil {
			refused[i] = pluginkit.Permanent(err)
			continue
		}
		g := group{e.Schema, e.Table, ct.Format(time.DateOnly)}
		o := open[g]
		size := int64(len(e.Payload))
		if o != nil && maxBytes > 0 && o.bytes+size > maxBytes {
			o = nil // full: the next events of the group start a new object
		}
		if o == nil {
			o = &object{schema: g.schema, table: g.table, date: g.date}
			open[g] = o
			objs = append(objs, o)
		}
		o.events = append(o.events, *e)
		o.idx = append(o.idx, i)
		o.times = append(o.times, ct)
		o.bytes += size
	}
	return objs, refused
}
