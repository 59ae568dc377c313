// Package pluginlock installs sink plugins into a plugin directory and
// keeps that directory's lock file, the record of what `walcast plugin
// install` put there: each plugin's version, where it came from and the
// SHA-256 of the installed executable.
//
// The lock file is what makes a plugin trustworthy at run time: the
// go-plugin handshake cookie only tells a plugin from a random program, it
// proves nothing, so the host refuses to launch an installed plugin whose
// hash differs from the recorded one (see daemon.PluginSet). Plugins
// without an entry, such as the built-in sinks `make build` puts next to
// walcast, run unverified.
//
// Writers replace the lock file atomically (temporary file, then rename),
// so a reader never sees half a file; two installs into one directory at
// the same moment may still lose one entry, since nothing locks across
// processes.
package pluginlock

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// FileName is the lock file's name inside a plugin directory.
const FileName = "walcast-plugins.lock.json"

// Path returns the lock file of the plugin directory dir.
func Path(dir string) string { return filepath.Join(dir, FileName) }

// Entry records one installed plugin.
type Entry struct {
	// Version is what the plugin reported in its Info when installed.
	Version string `json:"version"`
	// SHA256 is the hex SHA-256 of the installed executable.
	SHA256 string `json:"sha256"`
	// Source is what was installed: an absolute path (binary or package
	// directory) or package@version with the version the go command
	// resolved (v1.2.3 where the user asked for @latest).
	Source string `json:"source"`
	// InstalledAt is when, in UTC, to the second.
	InstalledAt time.Time `json:"installed_at"`
}

// File is the content of a lock file, plugins keyed by sink type.
// encoding/json writes map keys sorted, so the file stays sorted and
// diffs between installs stay small.
type File struct {
	Plugins map[string]Entry `json:"plugins"`
}

// Read returns the lock file of dir. A missing file is an empty lock, not
// an error: a directory nobody installed into has nothing to verify. A
// file that exists but cannot be parsed is an error, so that damage to it
// never silently turns verification off.
func Read(dir string) (*File, error) {
	path := Path(dir)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &File{Plugins: map[string]Entry{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read plugin lock file: %w", err)
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("read plugin lock file %s: %w (fix or delete it, then re-run `walcast plugin install` for each plugin)", path, err)
	}
	if f.Plugins == nil {
		f.Plugins = map[string]Entry{}
	}
	return &f, nil
}

// Lookup returns the entry for sinkType in dir's lock file, and whether
// there is one.
func Lookup(dir, sinkType string) (Entry, bool, error) {
	f, err := Read(dir)
	if err != nil {
		return Entry{}, false, err
	}
	e, ok := f.Plugins[sinkType]
	return e, ok, nil
}

// Write replaces dir's lock file with f, atomically.
func Write(dir string, f *File) error {
	if f.Plugins == nil {
		f.Plugins = map[string]Entry{}
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("write plugin lock file: %w", err)
	}
	data = append(data, '\n')
	if err := writeAtomic(Path(dir), 0o644, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}); err != nil {
		return fmt.Errorf("write plugin lock file: %w", err)
	}
	return nil
}

// writeAtomic writes path through a temporary file in the same directory
// that is synced and then renamed over path, so that path is always
// either the old content or the new one.
func writeAtomic(path string, perm fs.FileMode, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// FileSHA256 returns the hex SHA-256 of the file at path.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lockDir takes an exclusive lock on dir's lock file for a read-modify-
// write, so that two `walcast plugin install` runs into one directory
// never lose each other's entries. The lock is held on a sidecar file:
// the lock file itself is replaced by rename on every write.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "."+FileName+".flock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock plugin lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock plugin lock file: %w", err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// Update applies change to dir's lock file while holding the directory's
// lock: read, change, write, as one step against other walcast commands.
func Update(dir string, change func(*File) error) error {
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	f, err := Read(dir)
	if err != nil {
		return err
	}
	if err := change(f); err != nil {
		return err
	}
	return Write(dir, f)
}
