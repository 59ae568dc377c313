pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = []
}

# want: no_tables.hcl:5:12: error: No tables: The source captures nothing; list at least one schema-qualified table.
