package pluginlock

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLockRoundTrip(t *testing.T) {
	dir := t.TempDir()
	f, err := Read(dir)
	if err != nil || len(f.Plugins) != 0 {
		t.Fatalf("Read of a directory without a lock file = %+v, %v; want empty, nil", f, err)
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Plugins["zeta"] = Entry{Version: "v2", SHA256: strings.Repeat("b", 64), Source: "example.com/z@v2", InstalledAt: at}
	f.Plugins["alpha"] = Entry{Version: "v1", SHA256: strings.Repeat("a", 64), Source: "/src/alpha", InstalledAt: at}
	if err := Write(dir, f); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if !strings.Contains(s, `"installed_at": "2026-11-30T12:00:00Z"`) {
		t.Errorf("installed_at is not RFC 3339:\n%s", s)
	}
	if strings.Index(s, `"alpha"`) > strings.Index(s, `"zeta"`) {
		t.Errorf("entries not sorted:\n%s", s)
	}
	e, ok, err := Lookup(dir, "zeta")
	if err != nil || !ok || e != f.Plugins["zeta"] {
		t.Errorf("Lookup(zeta) = %+v, %v, %v", e, ok, err)
	}
	if _, ok, err := Lookup(dir, "webhook"); ok || err != nil {
		t.Errorf("Lookup(webhook) = %v, %v; want no entry, nil", ok, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d files after Write, want only the lock file", len(entries))
	}
}

// A damaged lock file must not read as "nothing locked", which would turn
// verification off.
func TestReadDamaged(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(Path(dir), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Lookup(dir, "x"); err == nil || !strings.Contains(err.Error(), Path(dir)) {
		t.Errorf("Lookup in a damaged lock = %v, want an error naming the file", err)
	}
}

func TestParseSource(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "walcast-sink-x")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "notexec")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		arg     string
		kind    SourceKind
		wantErr string
	}{
		{arg: exe, kind: SourceBinary},
		{arg: dir, kind: SourcePackageDir},
		{arg: "github.com/acme/walcast-sink-s3@v1.2.3", kind: SourceModule},
		{arg: "example.com/x/cmd/walcast-sink-y@latest", kind: SourceModule},
		{arg: plain, wantErr: "not executable"},
		{arg: "github.com/acme/walcast-sink-s3", wantErr: "@latest"},
		{arg: "./nosuch@v1", wantErr: "not a file, a directory or module/path@version"},
		{arg: "nosuch", wantErr: "no such file or directory"},
		{arg: "github.com/acme/x@", wantErr: "module/path@version"},
		{arg: "", wantErr: "empty"},
	} {
		src, err := ParseSource(tc.arg)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseSource(%q) = %+v, %v; want an error containing %q", tc.arg, src, err, tc.wantErr)
			}
			continue
		}
		if err != nil || src.Kind != tc.kind {
			t.Errorf("ParseSource(%q) = %+v, %v; want kind %d", tc.arg, src, err, tc.kind)
		}
		if tc.kind == SourceModule && src.Arg != tc.arg {
			t.Errorf("ParseSource(%q).Arg = %q", tc.arg, src.Arg)
		}
	}
}

func TestCheckType(t *testing.T) {
	for _, ok := range []string{"webhook", "s3-archive", "my_sink2"} {
		if err := checkType(ok); err != nil {
			t.Errorf("checkType(%q) = %v", ok, err)
		}
	}
	for _, bad := range // "my_sink.v2" and "Webhook": a pipeline's sink block could never name
	// them, so installing them would only fail later.
	[]string{"", ".", "..", "a/b", `a\b`, "-x", "a b", "my_sink.v2", "Webhook"} {
		if checkType(bad) == nil {
			t.Errorf("checkType(%q) = nil, want an error", bad)
		}
	}
}

// Concurrent read-modify-writes of one lock file keep every entry.
func TestConcurrentUpdatesKeepEveryEntry(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			err := Update(dir, func(f *File) error {
				f.Plugins[fmt.Sprintf("sink%d", i)] = Entry{Version: "v1", SHA256: strings.Repeat("a", 64)}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	f, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Plugins) != 40 {
		t.Fatalf("%d entries after 40 concurrent updates, want 40", len(f.Plugins))
	}
}
