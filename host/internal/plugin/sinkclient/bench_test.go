package sinkclient

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// BenchmarkDeliverStdout is the daemon's hop to a sink on its own: Deliver
// calls to a real stdout plugin process writing to /dev/null, with events
// shaped like walcast-bench's workload (~200-byte envelopes). Besides the
// time per event it reports the CPU per event of this process (the host
// side: request encoding, gRPC, TLS) and of the plugin (from /proc), the
// figures docs/benchmarks.md ("Where the daemon spends its time") quotes:
//
//	go test -run '^$' -bench DeliverStdout -benchtime 200x ./host/internal/plugin/sinkclient
func BenchmarkDeliverStdout(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			p := launch(b, "stdout", Config{SinkID: "out"}, map[string]any{"path": os.DevNull})
			events := benchEvents(size)
			batch := attempt.Batch{Events: events}
			// One call first: connection set-up is not per event.
			if _, err := p.Deliver(b.Context(), batch); err != nil {
				b.Fatal(err)
			}
			hostBefore, pluginBefore := selfCPU(b), procCPU(b, p.Pid())
			b.ResetTimer()
			for range b.N {
				if _, err := p.Deliver(b.Context(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			n := float64(b.N * size)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/event")
			b.ReportMetric((selfCPU(b)-hostBefore)/n*1e6, "host-µs/event")
			b.ReportMetric((procCPU(b, p.Pid())-pluginBefore)/n*1e6, "plugin-µs/event")
		})
	}
}

// benchEvents returns n inserts of public.bench like walcast-bench's.
func benchEvents(n int) []cdc.Event {
	out := make([]cdc.Event, n)
	for i := range out {
		id := cdc.EventID{CommitLSN: 0x6C10DA8 + uint64(i/100)*0x3000, Index: uint64(i % 100)}
		key := fmt.Sprintf(`{"id":%d}`, 100000+i)
		payload := fmt.Sprintf(`{"id":%q,"commit_lsn":"0/%X","xid":%d,"commit_time":"2026-12-02T15:03:21.123456Z","schema":"public","table":"bench","op":"insert","key":%s,"new":{"id":%d,"account":%d,"name":"name-%d","amount":"%d.25","payload":"%s","updated_at":"2026-12-02T15:03:21.123456Z"},"old":null}`,
			id.String(), id.CommitLSN, 7412+i/100, key, 100000+i, i%1000, i, i%10000, strings.Repeat("x", 40))
		out[i] = cdc.Event{ID: id, Schema: "public", Table: "bench", Op: cdc.OpInsert, Key: []byte(key), Payload: []byte(payload)}
	}
	return out
}

// selfCPU is this process's user+system CPU in seconds.
func selfCPU(tb testing.TB) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// procCPU is process pid's user+system CPU in seconds, from /proc.
func procCPU(tb testing.TB, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// utime 14 and stime 15.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}
