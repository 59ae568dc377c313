pipeline = ""

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

# want: pipeline_name_empty.hcl:1:12: error: Invalid pipeline name: The pipeline name "" is empty. It names the replication slot and publication by default, so it follows PostgreSQL's rule for slot names.
