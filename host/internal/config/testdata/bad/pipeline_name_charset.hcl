pipeline = "Shop-1"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

# want: pipeline_name_charset.hcl:1:12: error: Invalid pipeline name: The pipeline name "Shop-1" contains 'S'; use only lower-case letters, digits and underscores. It names the replication slot and publication by default, so it follows PostgreSQL's rule for slot names.
