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

	// A connector with Debezium's Outbox Event Router: a kafka sink with
	// the outbox block the router's settings map to, which validate takes.
	out, errOut, code = walcastCmd(t, "import", "debezium", filepath.Join("testdata", "import", "outbox-connector.properties"))
	if code != 0 {
		t.Fatalf("walcast import debezium of the outbox connector exited %d:\n%s", code, errOut)
	}
	for _, want := range []string{`sink "kafka" "outbox" {`, `table          = "public.outbox"`, `key_column     = "aggregate_id"`,
		`route_column   = "aggregate_type"`, `route_prefix   = "events."`, `type_column    = "type"`} {
		if !strings.Contains(out, want) {
			t.Errorf("pipeline lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `format = "debezium"`) || strings.Contains(errOut, "transforms.outbox.type") || !strings.Contains(errOut, "not eventType") {
		t.Errorf("the router's events are not in walcast's format, or its settings were not carried over:\n%s\n%s", out, errOut)
	}
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	vout, verr, code = walcastEnvCmd(t, []string{"WALCAST_SOURCE_DSN=postgres://debezium@postgres.internal:5432/orders", "KAFKA_BROKERS=127.0.0.1:9092"},
		"validate", file, "--plugin-dir", binDir)
	if code != 0 {
		t.Fatalf("walcast validate refused the imported outbox pipeline (exit %d):\n%s%s\n%s", code, vout, verr, out)
	}

	// A configuration that is not a PostgreSQL connector is refused.
	other := filepath.Join(t.TempDir(), "mysql.properties")
	os.WriteFile(other, []byte("connector.class=io.debezium.connector.mysql.MySqlConnector\n"), 0o644)
	if _, errOut, code := walcastCmd(t, "import", "debezium", other); code != 1 || !strings.Contains(errOut, "PostgresConnector") {
		t.Errorf("import of a MySQL connector: exit %d, %s", code, errOut)
	}
}

// TestImportSequin: walcast import sequin turns a realistic sequin.yaml
// (two databases, a webhook and a Kafka sink with actions, filters and a
// transform, an SQS sink, a disabled sink) into the pipeline of the chosen
// database that walcast validate accepts, with format = "sequin" on each
// sink, its table, actions (plus backfill reads) and batch size, and lists
// on stderr every setting it left out. Secrets are never written.
func TestImportSequin(t *testing.T) {
	file := filepath.Join("testdata", "import", "sequin.yaml")
	if _, errOut, code := walcastCmd(t, "import", "sequin", file); code != 1 || !strings.Contains(errOut, "choose it with --database") {
		t.Errorf("two databases without --database: exit %d, %s", code, errOut)
	}
	out, errOut, code := walcastCmd(t, "import", "sequin", "--database", "production-db", file)
	if code != 0 {
		t.Fatalf("walcast import sequin exited %d:\n%s", code, errOut)
	}
	for _, want := range []string{`pipeline = "production_db"`, `tables = ["public.users", "billing.orders"]`,
		`slot   = "sequin_slot"`, `publication = "sequin_pub"`, `sink "webhook" "orders_webhook"`, `format = "sequin"`,
		`ops    = ["insert", "update", "read"]`, `batch_size = 10`, `url = "https://api.example.com/hooks/orders"`,
		`"Authorization" = env("SEQUIN_ORDERS_ENDPOINT_AUTHORIZATION")`, `sink "kafka" "users_kafka"`,
		`brokers = ["${env("KAFKA_HOST")}:9092", "kafka-2.internal:9092"]`, `topics  = { "public.users" = "users" }`,
		`mechanism = "scram-sha-256"`} {
		if !strings.Contains(out, want) {
			t.Errorf("pipeline lacks %s:\n%s", want, out)
		}
	}
	for _, secret := range []string{"token123", "kafka-secret", "adminpass123", "AKIAXXXX"} {
		if strings.Contains(out, secret) {
			t.Errorf("the secret %s was written into the pipeline:\n%s", secret, out)
		}
	}
	for _, want := range []string{"users: no walcast equivalent", "transforms:", "change_retentions:", "database analytics-db and its sinks",
		"sinks[orders-webhook].filters", "sinks[orders-webhook].group_column_names", "sinks[users-kafka].transform",
		`sink users-sqs: destination type "sqs"`, "sink old-audit: disabled", "encrypted_headers Authorization",
		"the default of ${KAFKA_HOST:-localhost}", "sinks[users-kafka].destination.password"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not list %s:\n%s", want, errOut)
		}
	}
	path := filepath.Join(t.TempDir(), "pipeline.hcl")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	vout, verr, code := walcastEnvCmd(t, []string{"WALCAST_SOURCE_DSN=postgres://sequin@prod.db.example.com:5432/app_production",
		"KAFKA_HOST=kafka-1.internal", "SEQUIN_ORDERS_ENDPOINT_AUTHORIZATION=Bearer x", "SEQUIN_USERS_KAFKA_KAFKA_PASSWORD=x"},
		"validate", path, "--plugin-dir", binDir)
	if code != 0 {
		t.Fatalf("walcast validate refused the imported pipeline (exit %d):\n%s%s\n%s", code, vout, verr, out)
	}
	if _, errOut, code := walcastCmd(t, "import", "sequin", "--database", "nope", file); code != 1 || !strings.Contains(errOut, `no database named "nope"`) {
		t.Errorf("an unknown --database: exit %d, %s", code, errOut)
	}
}
