package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// sseFrame is one server-sent event as a browser parses it.
type sseFrame struct{ ID, Event, Data string }

// sseSubscribe connects to an SSE stream and returns its frames.
func sseSubscribe(t *testing.T, url, lastEventID string) <-chan sseFrame {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	t.Cleanup(func() { resp.Body.Close() })
	out := make(chan sseFrame, 10000)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var f sseFrame
		for sc.Scan() {
			name, value, _ := strings.Cut(sc.Text(), ":")
			value = strings.TrimPrefix(value, " ")
			switch name {
			case "":
				if f.Data != "" {
					out <- f
				}
				f = sseFrame{}
			case "id":
				f.ID = value
			case "event":
				f.Event = value
			case "data":
				f.Data = value
			}
		}
	}()
	return out
}

// TestSSE: walcast run with the sse sink beside a webhook sink. A browser
// style client receives every change as an id/event/data frame carrying
// the envelope, in commit order; reconnecting with Last-Event-ID resumes
// right after that event; and a client that stops reading holds back
// neither the webhook sink nor the slot (sse is not durable).
func TestSSE(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcv := newReceiver(t)
	addr := freeAddr(t)
	url := "http://" + addr + "/events"
	pipeline := writePipeline(t, "sse", dsn, []string{"public.items"},
		sinkSpec{ID: "browser", SinkType: "sse", Config: fmt.Sprintf("    listen = %q\n    retention_events = 100000\n", addr)},
		sinkSpec{ID: "hook", URL: rcv.URL})
	proc := startCapturing(t, db, pipeline)
	waitFor(t, "the sse server", time.Minute, func() bool {
		resp, err := http.Get(url + "?tables=none.none")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	live := sseSubscribe(t, url, "")
	stalled, err := net.Dial("tcp", addr) // connects, asks, never reads
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "GET /events HTTP/1.1\r\nHost: %s\r\n\r\n", addr)

	for i := range 30 {
		exec1(t, db, fmt.Sprintf(`INSERT INTO items SELECT g, 0 FROM generate_series(%d, %d) g`, i*10+1, i*10+10))
	}
	exec1(t, db, `UPDATE items SET v = 1 WHERE id <= 50`)
	exec1(t, db, `DELETE FROM items WHERE id > 250`)
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	const total = 300 + 50 + 50

	var got []sseFrame
	deadline := time.After(time.Minute)
	for len(got) < total {
		select {
		case f, ok := <-live:
			if !ok {
				t.Fatalf("stream ended after %d frames", len(got))
			}
			got = append(got, f)
		case <-deadline:
			t.Fatalf("%d of %d frames after a minute", len(got), total)
		}
	}
	var prev pluginkit.EventID
	for i, f := range got {
		id, err := pluginkit.ParseEventID(f.ID)
		if err != nil || f.Event != "change" || (i > 0 && id.Compare(prev) <= 0) {
			t.Fatalf("frame %d %+v: want a change with an id above %s", i, f, prev)
		}
		prev = id
		var env struct {
			ID  string          `json:"id"`
			Op  string          `json:"op"`
			Key json.RawMessage `json:"key"`
		}
		if err := json.Unmarshal([]byte(f.Data), &env); err != nil || env.ID != f.ID || env.Op == "" {
			t.Fatalf("frame %d data is not its envelope: %q (%v)", i, f.Data, err)
		}
	}
	// Resume after the 200th event: exactly the rest, in order.
	resumed := sseSubscribe(t, url, got[199].ID)
	for i := 200; i < total; i++ {
		select {
		case f := <-resumed:
			if f.ID != got[i].ID || f.Data != got[i].Data {
				t.Fatalf("resumed frame %d is %+v, want %+v", i, f, got[i])
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("resume stopped at frame %d", i)
		}
	}
	// The stalled client holds nothing back.
	waitFor(t, "the webhook sink", time.Minute, func() bool { return rcv.distinct() == total })
	waitFor(t, "the slot to pass the workload", time.Minute, func() bool { return confirmedFlush(t, db, "walcast_sse") >= end })
	proc.stop()
}

// readFrames reads n frames from a stream, failing after a minute.
func readFrames(t *testing.T, what string, frames <-chan sseFrame, n int) []sseFrame {
	t.Helper()
	var got []sseFrame
	deadline := time.After(time.Minute)
	for len(got) < n {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatalf("%s: stream ended after %d of %d frames", what, len(got), n)
			}
			got = append(got, f)
		case <-deadline:
			t.Fatalf("%s: %d of %d frames after a minute", what, len(got), n)
		}
	}
	return got
}

// TestSSEChannels: walcast run with an sse sink whose route is a function
// of the row's key (two channels, one with a '/') beside an unrouted
// webhook sink. A client of each channel receives exactly the events of
// its rows, every one the webhook sink received and no other, in commit
// order; the bare path streams both channels; and resuming a channel
// with Last-Event-ID gives the rest of that channel.
func TestSSEChannels(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcv := newReceiver(t)
	addr := freeAddr(t)
	url := "http://" + addr + "/events"
	pipeline := writePipeline(t, "ssechannels", dsn, []string{"public.items"},
		sinkSpec{ID: "browser", SinkType: "sse", Top: "  route = \"key.id % 2 == 0 ? 'even' : 'odd/rows'\"\n",
			Config: fmt.Sprintf("    listen = %q\n    retention_events = 100000\n", addr)},
		sinkSpec{ID: "hook", URL: rcv.URL})
	proc := startCapturing(t, db, pipeline)
	defer proc.stop()
	waitFor(t, "the sse server", time.Minute, func() bool {
		resp, err := http.Get(url + "?tables=none.none")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	even, odd, all := sseSubscribe(t, url+"/even", ""), sseSubscribe(t, url+"?channel=odd/rows", ""), sseSubscribe(t, url, "")

	for i := range 10 {
		exec1(t, db, fmt.Sprintf(`INSERT INTO items SELECT g, 0 FROM generate_series(%d, %d) g`, i*10+1, i*10+10))
		exec1(t, db, fmt.Sprintf(`UPDATE items SET v = v + 1 WHERE id %% 3 = %d`, i%3))
	}
	exec1(t, db, `DELETE FROM items WHERE id > 80`)
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	// The webhook sink is durable: once the slot passed the workload it
	// has every event, and its events are the truth.
	waitFor(t, "the slot to pass the workload", time.Minute, func() bool { return confirmedFlush(t, db, "walcast_ssechannels") >= end })
	truth := firstCopies(rcv.events())
	slices.SortFunc(truth, func(a, b received) int { return a.ID.Compare(b.ID) })
	want := map[string][]string{}
	for _, r := range truth {
		var key struct{ ID int }
		if err := json.Unmarshal([]byte(r.Key), &key); err != nil {
			t.Fatalf("key %q: %v", r.Key, err)
		}
		ch := map[bool]string{true: "even", false: "odd/rows"}[key.ID%2 == 0]
		want[ch] = append(want[ch], r.ID.String())
	}
	ids := func(fs []sseFrame) []string {
		out := make([]string, len(fs))
		for i, f := range fs {
			out[i] = f.ID
		}
		return out
	}
	gotEven := readFrames(t, "even", even, len(want["even"]))
	gotOdd := readFrames(t, "odd/rows", odd, len(want["odd/rows"]))
	gotAll := readFrames(t, "all", all, len(want["even"])+len(want["odd/rows"]))
	for ch, got := range map[string][]sseFrame{"even": gotEven, "odd/rows": gotOdd} {
		if fmt.Sprint(ids(got)) != fmt.Sprint(want[ch]) {
			t.Fatalf("channel %s got %v,\nwant (the webhook sink's events of its rows, in commit order) %v", ch, ids(got), want[ch])
		}
	}
	var prev pluginkit.EventID
	for i, f := range gotAll {
		id := pluginkit.MustParseEventID(f.ID)
		if i > 0 && id.Compare(prev) <= 0 {
			t.Fatalf("the bare path's frame %d (%s) is not after %s", i, id, prev)
		}
		prev = id
	}

	// Resume the odd channel halfway: exactly the rest of it.
	half := len(gotOdd) / 2
	resumed := readFrames(t, "odd resumed", sseSubscribe(t, url+"/odd/rows", gotOdd[half-1].ID), len(gotOdd)-half)
	if fmt.Sprint(ids(resumed)) != fmt.Sprint(ids(gotOdd[half:])) {
		t.Fatalf("resumed odd/rows got %v, want %v", ids(resumed), ids(gotOdd[half:]))
	}
	t.Logf("even: %d events, odd/rows: %d, all: %d", len(gotEven), len(gotOdd), len(gotAll))
}
