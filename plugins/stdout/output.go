package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/walcast/walcast/pluginkit"
)

// outputFile is what the sink needs of the file it appends to (*os.File).
type outputFile interface {
	io.Writer
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
}

func openAppend(path string) (outputFile, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
}

// openPath opens the file and notes whether it is a regular file. A
// regular file is cut back to its last whole line (or to s.cut): what
// follows it is part of a batch that was never acknowledged (a crash in
// the middle of one, or a failed batch that could not be taken back), and
// the next line must not start inside it. Callers hold s.mu.
func (s *Sink) openPath() error {
	f, err := s.openFile(s.path)
	if err != nil {
		return fmt.Errorf("open output file %s: %w", s.path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open output file %s: %w", s.path, err)
	}
	// Only a regular file can be truncated or synced: fsync on a
	// character device or a pipe (path = "/dev/null", a FIFO) fails with
	// EINVAL, and there is nothing to make durable there.
	s.regular = st.Mode().IsRegular()
	if s.regular {
		if err := s.cutTail(f, st.Size()); err != nil {
			f.Close()
			return err
		}
	}
	s.file = f
	return nil
}

// cutTail truncates f, of size bytes, to s.cut if that is set, and then to
// the end of its last whole line.
func (s *Sink) cutTail(f outputFile, size int64) error {
	end := size
	if s.cut >= 0 && s.cut < end {
		end = s.cut
	}
	whole, err := lastLineEnd(s.path, end)
	if err != nil {
		// Unreadable (a write-only file): nothing to check the tail with;
		// a failed batch of this process was still cut back (s.cut).
		s.log.Debug("cannot read the output file's last line; not checked", "path", s.path, "err", err)
		whole = end
	}
	if whole < size {
		if err := f.Truncate(whole); err != nil {
			return fmt.Errorf("cut %s back to its last whole line (%d bytes): %w; fix the file system or remove the incomplete last line by hand", s.path, whole, err)
		}
		s.log.Warn("output file ended in an incomplete line, from a batch that was never acknowledged; cut it off (its events are written again)",
			"path", s.path, "bytes", size-whole)
	}
	s.cut = -1
	return nil
}

// lastLineEnd returns the offset just past the last newline in the first
// size bytes of path: size when they end with one, 0 when there is none.
func lastLineEnd(path string, size int64) (int64, error) {
	if size == 0 {
		return 0, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return size, err
	}
	defer f.Close()
	buf := make([]byte, 4<<10)
	for end := size; end > 0; {
		n := min(int64(len(buf)), end)
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return size, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return end - n + int64(i) + 1, nil
		}
		end -= n
		if len(buf) < 1<<20 {
			buf = make([]byte, 2*len(buf))
		}
	}
	return 0, nil
}

// appendFile writes the batch to the regular file and fsyncs it; on any
// failure it takes the batch back out (undo). Callers hold s.mu.
func (s *Sink) appendFile(events []pluginkit.Event) error {
	st, err := s.file.Stat()
	if err != nil {
		return fmt.Errorf("stat %s before a batch: %w", s.path, err)
	}
	before := st.Size()
	err = s.writeBatch(s.file, events)
	if err != nil {
		return s.undo(before, pathError("write", s.path, err))
	}
	if err := s.file.Sync(); err != nil {
		return s.undo(before, pathError("sync", s.path, err))
	}
	return nil
}

// pathError names op and path in err unless it does already, as the
// *os.PathError of an *os.File does.
func pathError(op, path string, err error) error {
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		return err
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}

// undo truncates the file back to before, its size when the failed batch
// began, and closes the descriptor; the next Deliver opens the file again
// and writes the whole batch anew. The descriptor is not used again
// because after a failed fsync the kernel may have dropped the dirty pages
// and cleared the error, so that a second fsync on it reports success
// over lost data (PostgreSQL's fsync lesson).
func (s *Sink) undo(before int64, cause error) error {
	terr := s.file.Truncate(before)
	if cerr := s.file.Close(); cerr != nil {
		s.log.Debug("close after a failed batch", "path", s.path, "err", cerr)
	}
	s.file = nil
	hint := "check the file system (the kernel log says more)"
	if errors.Is(cause, syscall.ENOSPC) || errors.Is(cause, syscall.EDQUOT) {
		hint = "free space on the file system that holds it"
	}
	if terr != nil {
		// Reopening cuts it back before anything else is written.
		s.cut = before
		return fmt.Errorf("%w; taking the batch back out failed too (%v): the next attempt cuts the file back to %d bytes before it writes; %s",
			cause, terr, before, hint)
	}
	return fmt.Errorf("%w (the batch was taken back out, the file has its %d bytes from before it; it is written again on the next attempt; %s)",
		cause, before, hint)
}

// writeStream writes the batch to a stream, which cannot take back what a
// failed write put out: that may be whole lines (written again with the
// batch: at-least-once) and part of one, which is ended with a newline
// before the next batch. Callers hold s.mu.
func (s *Sink) writeStream(events []pluginkit.Event) error {
	dst, name := s.stdout(), "walcast's stdout"
	if s.file != nil {
		dst, name = s.file, s.path
	}
	out := &tally{w: dst}
	if s.torn {
		if _, err := out.Write([]byte{'\n'}); err != nil {
			return fmt.Errorf("write to %s: %w", name, err)
		}
		s.torn = false
	}
	if err := s.writeBatch(out, events); err != nil {
		s.torn = out.n > 0 && out.last != '\n'
		return fmt.Errorf("write to %s: %w (the batch is not acknowledged and is written again; a reader may have got part of it, and a partial line is ended with a newline first)", name, err)
	}
	return nil
}

// tally counts the bytes that reached w and keeps the last one.
type tally struct {
	w    io.Writer
	n    int64
	last byte
}

func (t *tally) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if n > 0 {
		t.n += int64(n)
		t.last = p[n-1]
	}
	return n, err
}

// stdoutFDEnv names the variable in which walcast tells its plugins the
// number of the descriptor that is walcast's own stdout. The host sets it
// in host/internal/plugin/sinkclient (Launch); the two names must match.
const stdoutFDEnv = "WALCAST_PLUGIN_STDOUT_FD"

// walcastStdout is where lines go without a path. walcast passes its own
// stdout to its plugins as an extra descriptor, so that a write that fails
// there (a full disk under `walcast run > file`, a closed pipe) fails this
// Deliver and the batch is not acknowledged. os.Stdout would be go-plugin's
// stream to the host, which writes the bytes later and can only log a
// failure, after the batch was acknowledged. Without the variable (tests,
// a walcast that does not pass it) that stream is the fallback.
//
// It is looked up at the first write, never earlier: until pluginkit.Serve
// runs os.Stdout is the handshake channel. It is kept for the life of the
// process because an *os.File closes its descriptor when collected.
var walcastStdout = sync.OnceValue(func() io.Writer {
	if v := os.Getenv(stdoutFDEnv); v != "" {
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			f := os.NewFile(uintptr(fd), "walcast stdout")
			if _, err := f.Stat(); err == nil {
				return f
			}
		}
	}
	return os.Stdout
})
