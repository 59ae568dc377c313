package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportDebezium: walcast import debezium turns a realistic connector
// configuration into a pipeline that walcast validate accepts (with the
// dsn and brokers in the environment, as the file's header says), carries
// its tables, slot, publication and format settings, and lists on stderr
// every setting it left out, the password among them, which it never
// writes.
func TestImportDebezium(t *testing.T) {
	out, errOut, code := walcastCmd(t, "import", "debezium", filepath.Join("testdata", "import", "inventory-connector.properties"))
	if code != 0 {
		t.Fatalf("walcast import debezium exited %d:\n%s", code, errOut)
	}
	for _, want := range []string{`pipeline = "dbserver1"`, `tables = ["inventory.customers", "inventory.orders"]`,
		`slot   = "debezium_inventory"`, `publication = "dbz_publication"`, `format = "debezium"`, `name                  = "dbserver1"`,
		`schemas               = false`, `decimal_handling_mode = "string"`, `topic_prefix = "dbserver1"`} {
		if !strings.Contains(out, want) {
			t.Errorf("pipeline lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "dbz-secret") {
		t.Errorf("the password was written into the pipeline:\n%s", out)
	}
	for _, want := range []string{`entry inventory\.audit_.*: a regular expression`, "database.password", "snapshot.mode = initial", "column.exclude.list", "transforms.unwrap.type", "heartbeat.interval.ms", "tasks.max"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not list %s:\n%s", want, errOut)
		}
	}
	file := filepath.Join(t.TempDir(), "pipeline.hcl")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	vout, verr, code := walcastEnvCmd(t, []string{"WALCAST_SOURCE_DSN=postgres://debezium@postgres.internal:5432/inventory", "KAFKA_BROKERS=127.0.0.1:9092"},
		"validate", file, "--plugin-dir", binDir)
	if code != 0 {
		t.Fatalf("walcast validate refused the imported pipeline (exit %d):\n%s%s\n%s", code, vout, verr, out)
	}

	// A configuration that is not a PostgreSQL connector is refused.
	other := filepath.Join(t.TempDir(), "mysql.properties")
	os.WriteFile(other, []byte("connector.class=io.debezium.connector.mysql.MySqlConnector\n"), 0o644)
	if _, errOut, code := walcastCmd(t, "import", "debezium", other); code != 1 || !strings.Contains(errOut, "PostgresConnector") {
		t.Errorf("import of a MySQL connector: exit %d, %s", code, errOut)
	}
}
