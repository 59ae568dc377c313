package decode

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/pgtest"
)

// TestDebeziumPostgresTypes decodes a real pgoutput stream of a row with a
// column of each type docs/formats.md maps, in the debezium format, and
// compares every value with what PostgreSQL itself computes for Debezium's
// representation of it (days since the epoch, microseconds, the unscaled
// decimal, base64), not with the decoder's own parsing.
func TestDebeziumPostgresTypes(t *testing.T) {
	cluster := pgtest.New(t, pgtest.Options{})
	dsn := cluster.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{
		`CREATE TYPE mood AS ENUM ('sad', 'happy')`,
		`CREATE TABLE every (id int PRIMARY KEY, small smallint, bg bigint, r real, d double precision,
			n numeric(12,2), nv numeric, mo money, b bool, bit1 bit(1), t text, vc varchar(10), ch char(3),
			by bytea, j json, jb jsonb, u uuid, x xml, ip inet, dt date, tm time, tm3 time(3),
			ts timestamp, ts3 timestamp(3), tstz timestamptz, ttz timetz, iv interval, ia int[], ta text[], m mood)`,
		`CREATE PUBLICATION walcast_dbz FOR TABLE every`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	repl := replicationConn(ctx, t, dsn)
	slot, err := pglogrepl.CreateReplicationSlot(ctx, repl, "walcast_dbz_test", "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true})
	if err != nil {
		t.Fatal(err)
	}
	start, _ := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if _, err := conn.Exec(ctx, `INSERT INTO every VALUES (1, -7, 9007199254740993, 1.5, -2.25,
		-12345.67, 3.14159265358979323846, '-1234.56', true, B'1', 'he said "hi"', 'short', 'ab',
		'\x0a0b0cff', '{"a": [1, 2]}', '{"b": {"c": null}, "a": 1}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
		'<a>x</a>', '10.1.2.3/16', '1969-07-20', '20:17:40.123456', '20:17:40.123',
		'2018-06-20 15:13:16.945104', '1960-06-20 15:13:16.945', '2026-11-30 12:00:00.1234+02',
		'10:00:00.5+02', '1 year 2 mons 3 days 04:05:06.78', '{1,NULL,3}', ARRAY['a b', NULL], 'happy')`); err != nil {
		t.Fatal(err)
	}
	if err := pglogrepl.StartReplication(ctx, repl, slot.SlotName, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'walcast_dbz'"},
	}); err != nil {
		t.Fatal(err)
	}
	d := New(Options{Formats: []Format{{Name: FormatDebezium, Debezium: dbzOpts}}})
	events, _ := readStream(ctx, t, repl, d, start, 1)
	if len(events) != 1 || len(events[0].Formats) != 1 {
		t.Fatalf("got %d events", len(events))
	}
	var v struct {
		After map[string]json.RawMessage `json:"after"`
	}
	if err := json.Unmarshal(events[0].Formats[0].Payload, &v); err != nil {
		t.Fatal(err)
	}

	// PostgreSQL computes each expected value; Go only formats it as JSON.
	var (
		small, r, dd, n2, nvScale, b, bit1, t1, vc, ch, byB64, j, jb, u, x, ip string
		bg, nUnscaled, moUnscaled, dtDays, tmUs, tm3Ms, tsUs, ts3Ms, tstzUs    int64
		nvUnscaled, m                                                          string
	)
	err = conn.QueryRow(ctx, `SELECT small::text, r::text, d::text, n::text, scale(nv)::text, b::text, (bit1 = B'1')::text,
		t, vc, ch, encode(by, 'base64'), j::text, jb::text, u::text, x::text, ip::text,
		bg, (n * 100)::bigint, (mo::numeric * 100)::bigint, dt - date '1970-01-01',
		(extract(epoch from tm) * 1000000)::bigint, (extract(epoch from tm3) * 1000)::bigint,
		(extract(epoch from ts) * 1000000)::bigint, floor(extract(epoch from ts3) * 1000)::bigint,
		(extract(epoch from tstz) * 1000000)::bigint,
		trunc(nv * 10::numeric ^ scale(nv))::text, m::text
		FROM every`).Scan(&small, &r, &dd, &n2, &nvScale, &b, &bit1, &t1, &vc, &ch, &byB64, &j, &jb, &u, &x, &ip,
		&bg, &nUnscaled, &moUnscaled, &dtDays, &tmUs, &tm3Ms, &tsUs, &ts3Ms, &tstzUs, &nvUnscaled, &m)
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) string {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.Encode(s)
		return strings.TrimSuffix(b.String(), "\n")
	}
	num := func(i int64) string { return strconv.FormatInt(i, 10) }
	dec := func(unscaled string) string {
		n, _ := new(big.Int).SetString(unscaled, 10)
		return str(base64.StdEncoding.EncodeToString(twosComplementBig(n)))
	}
	want := map[string]string{
		"id": "1", "small": small, "bg": num(bg), "r": r, "d": dd,
		"n":  dec(num(nUnscaled)),
		"nv": `{"scale":` + nvScale + `,"value":` + dec(nvUnscaled) + `}`,
		"mo": dec(num(moUnscaled)),
		"b":  b, "bit1": bit1, "t": str(t1), "vc": str(vc), "ch": str(ch),
		"by": str(byB64), "j": str(j), "jb": str(jb), "u": str(u), "x": str(x), "ip": str(ip),
		"dt": num(dtDays), "tm": num(tmUs), "tm3": num(tm3Ms), "ts": num(tsUs), "ts3": num(ts3Ms),
		"ia": "[1,null,3]", "ta": `["a b",null]`, "m": str(m),
	}
	for col, w := range want {
		if got := string(v.After[col]); got != w {
			t.Errorf("column %s: got %s, want %s", col, got, w)
		}
	}
	// Strings with time zones: parse them back and compare instants.
	var tstz string
	json.Unmarshal(v.After["tstz"], &tstz)
	if tt, err := time.Parse(time.RFC3339Nano, tstz); err != nil || tt.UnixMicro() != tstzUs || tt.Location() != time.UTC {
		t.Errorf("tstz %s: %v, want %d µs in UTC", tstz, err, tstzUs)
	}
	if got := string(v.After["ttz"]); got != `"08:00:00.5Z"` {
		t.Errorf("ttz %s", got)
	}
	wantIv := int64((((12+2)*daysPerMonth+3)*86400 + 4*3600 + 5*60 + 6.78) * 1e6)
	if got := string(v.After["iv"]); got != num(wantIv) {
		t.Errorf("iv %s, want %d", got, wantIv)
	}
	if len(v.After) != 30 {
		t.Errorf("after has %d columns, want 30", len(v.After))
	}
}
