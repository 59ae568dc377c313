pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["walcast.checkpoints"]
}

# want: table_walcast_schema.hcl:5:13: error: Invalid table name: Table "walcast.checkpoints" is in the walcast schema, which holds walcast's own state: the walcast schema is never captured.
