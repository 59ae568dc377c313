source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

# want: missing_pipeline.hcl:1:1: error: Missing pipeline name: Add pipeline = "<name>" at the top of the file; it keys the checkpoints and names the replication slot and publication.
