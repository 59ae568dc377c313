pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "stdout" "out" {
}

sink "webhook" "out" {
  config {
    url = "http://127.0.0.1:9000/hooks"
  }
}

# want: sink_duplicate_id.hcl:11:16: error: Duplicate sink id: Sink id "out" is already used by the sink at line 8; checkpoints are keyed by sink id, so every sink needs its own.
