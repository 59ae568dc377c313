pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "webhook" "billing" {
  ops = ["insert", "upsert", "insert"]
}

sink "webhook" "audit" {
  ops = []
}

# want: sink_ops.hcl:9:20: error: Invalid operation: Operation "upsert" is not one of insert, update, delete, truncate, read, schema, resync_begin, resync_end, message, detach.
# want: sink_ops.hcl:9:30: error: Duplicate operation: Operation "insert" is listed twice.
# want: sink_ops.hcl:13:9: error: Empty ops filter: An empty filter would deliver nothing; remove ops to deliver every operation.
