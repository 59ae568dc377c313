package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Standby starts a streaming standby of c: a base backup taken with
// pg_basebackup -R (which writes primary_conninfo and standby.signal),
// on a port of its own, in a directory of its own. It is for the tests
// that meet a server in recovery (status pointed at a standby, a
// failover). Close removes it; Promote makes it a primary.
func (c *Cluster) Standby(ctx context.Context) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "walcast-pg-standby-")
	if err != nil {
		return nil, fmt.Errorf("create standby directory: %w", err)
	}
	s := &Cluster{Dir: dir, Data: filepath.Join(dir, "data"), Host: c.Host, bin: c.bin, cred: c.cred}
	fail := func(err error) (*Cluster, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if c.cred != nil {
		if err := os.Chmod(dir, 0o755); err != nil {
			return fail(err)
		}
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fail(fmt.Errorf("hand standby directory to postgres: %w", err))
		}
	}
	// --checkpoint=fast: the default spread checkpoint made every
	// standby wait about two minutes for it on an idle test cluster.
	out, err := s.run(ctx, "pg_basebackup", "-h", c.Host, "-p", fmt.Sprint(c.Port), "-U", "postgres",
		"-D", s.Data, "-R", "-X", "stream", "--no-sync",
		// An immediate checkpoint: the default, spread, waits most of
		// checkpoint_timeout (minutes) before copying anything.
		"--checkpoint=fast")
	if err != nil {
		return fail(fmt.Errorf("pg_basebackup: %w\n%s", err, out))
	}
	if s.Port, err = freePort(); err != nil {
		return fail(err)
	}
	// The copied postgresql.conf names the primary's port and socket
	// directory; the later lines win.
	conf := []string{fmt.Sprintf("port = %d", s.Port), fmt.Sprintf("unix_socket_directories = '%s'", dir), "hot_standby = on"}
	f, err := os.OpenFile(filepath.Join(s.Data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fail(fmt.Errorf("open standby postgresql.conf: %w", err))
	}
	_, err = f.WriteString("\n# walcast pgtest standby\n" + strings.Join(conf, "\n") + "\n")
	f.Close()
	if err != nil {
		return fail(fmt.Errorf("write standby postgresql.conf: %w", err))
	}
	if err := s.Start(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

// Promote ends a standby's recovery: from then on it is a primary.
func (c *Cluster) Promote(ctx context.Context) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.Data, "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("pg_ctl promote: %w\n%s", err, out)
	}
	return nil
}
