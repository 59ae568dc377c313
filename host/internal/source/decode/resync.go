package decode

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// ResyncPrefix is the prefix of the transactional logical decoding
// messages that bracket a resync of one table: the begin marker commits
// with the resync's start, before its first chunk; the end marker commits
// with its last chunk, after the chunk's rows. The payload is a
// ResyncMarker as JSON.
const ResyncPrefix = "walcast.resync"

// Phases of a resync marker.
const (
	ResyncBegin = "begin"
	ResyncEnd   = "end"
)

// ResyncMarker is the payload of one resync marker message.
type ResyncMarker struct {
	// Pipeline is the pipeline that asked (other pipelines ignore it).
	Pipeline string `json:"pipeline"`
	// Resync is the resync's id (its row in walcast.backfills).
	Resync int64  `json:"resync"`
	Phase  string `json:"phase"`
	// Sinks are the sinks the resync is for; empty means every sink.
	Sinks  []string `json:"sinks,omitempty"`
	Schema string   `json:"schema"`
	Table  string   `json:"table"`
}

// resync decodes a resync marker of this pipeline into one resync_begin or
// resync_end event of its table. Its envelope is a truncate's without the
// truncate's options and with the resync's id:
//
//	{"id":…,"commit_lsn":…,"xid":…,"commit_time":…,"schema":…,"table":…,
//	 "op":"resync_begin","key":null,"new":null,"old":null,"resync":7}
func (d *Decoder) resync(m *pglogrepl.LogicalDecodingMessage, emit func(change.Event) error) error {
	if !d.inTx {
		return fmt.Errorf("decode resync marker at %s: no transaction is open", m.LSN)
	}
	var r ResyncMarker
	if err := json.Unmarshal(m.Content, &r); err != nil {
		return fmt.Errorf("decode resync marker at %s: %w", m.LSN, err)
	}
	if r.Pipeline != d.opts.Pipeline {
		return nil
	}
	var op cdc.Op
	switch r.Phase {
	case ResyncBegin:
		op = cdc.OpResyncBegin
	case ResyncEnd:
		op = cdc.OpResyncEnd
	default:
		return fmt.Errorf("decode resync marker at %s: unknown phase %q", m.LSN, r.Phase)
	}
	rel := tableRelation(r.Schema, r.Table)

	b := d.appendHead(d.buf[:0], rel, op)
	var lay change.Layout
	b, keyStart, keyEnd := appendNoRow(b, &lay)
	b = append(b, `,"resync":`...)
	b = strconv.AppendInt(b, r.Resync, 10)
	d.buf = append(b, '}')
	d.sinks = r.Sinks
	if len(d.sinks) == 0 {
		d.sinks = nil
	}
	defer func() { d.sinks = nil }()
	// No format has a shape for a marker: every sink gets walcast's
	// envelope for it (docs/formats.md).
	return d.emit(rel, op, keyStart, keyEnd, nil, lay, nil, emit)
}
