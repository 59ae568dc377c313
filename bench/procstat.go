package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// procUsage is what /proc says about one process.
type procUsage struct {
	CPU    float64 // utime+stime, seconds
	HWMKiB int64   // VmHWM: peak resident set
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// readProc reads the CPU time and peak RSS of pid.
func readProc(pid int) (procUsage, error) {
	var u procUsage
	var err error
	if u.CPU, err = readProcCPU(pid); err != nil {
		return u, err
	}
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	defer status.Close()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			u.HWMKiB, _ = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return u, sc.Err()
}

// children lists the direct children of pid.
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// treeUsage sums the usage of pid's children (CPU added, peak RSS added:
// they are resident at the same time).
func childrenUsage(pid int) procUsage {
	var sum procUsage
	for _, c := range children(pid) {
		if u, err := readProc(c); err == nil {
			sum.CPU += u.CPU
			sum.HWMKiB += u.HWMKiB
		}
	}
	return sum
}

// senderWatch follows the CPU time of the walsender serving a path's slot.
// The walsender of pg_recvlogical and of the library consumer exits with
// its client, so its CPU cannot be read once the drain is over: it is
// sampled every senderSample until stop, and the last reading taken while
// it was alive counts.
type senderWatch struct {
	pid     int
	first   float64
	last    atomic.Uint64 // math.Float64bits of the last reading
	stopped chan struct{}
	once    sync.Once
	done    chan struct{}
}

// senderSample is how often the walsender's CPU is read: at the end of a
// drain its last sample is at most this old, a few ‰ of a drain.
const senderSample = 20 * time.Millisecond

// watchSender starts following pid's CPU time; nil when /proc cannot be
// read (then the walsender's share is reported as zero).
func watchSender(pid int) *senderWatch {
	u, err := readProcCPU(pid)
	if err != nil {
		return nil
	}
	w := &senderWatch{pid: pid, first: u, stopped: make(chan struct{}), done: make(chan struct{})}
	w.last.Store(math.Float64bits(u))
	go func() {
		defer close(w.done)
		t := time.NewTicker(senderSample)
		defer t.Stop()
		for {
			select {
			case <-w.stopped:
			case <-t.C:
			}
			u, err := readProcCPU(pid)
			if err != nil {
				return // gone with its client
			}
			w.last.Store(math.Float64bits(u))
			select {
			case <-w.stopped:
				return
			default:
			}
		}
	}()
	return w
}

// stop returns the CPU seconds the walsender used since watchSender. It
// may be called again (a deferred cleanup): it returns the same figure.
func (w *senderWatch) stop() float64 {
	if w == nil {
		return 0
	}
	w.once.Do(func() { close(w.stopped) })
	<-w.done
	return math.Float64frombits(w.last.Load()) - w.first
}

// readProcCPU reads utime+stime of pid, in seconds.
func readProcCPU(pid int) (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	// Fields after the parenthesised command name, which may hold spaces:
	// f[0] is field 3 (state); utime is field 14, stime 15.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return float64(ut+st) / clockTicks, nil
}
