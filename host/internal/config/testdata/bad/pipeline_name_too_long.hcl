pipeline = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

# want: pipeline_name_too_long.hcl:1:12: error: Pipeline name too long: The default slot and publication name "walcast_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" is 64 characters long; PostgreSQL allows at most 63; shorten the pipeline name or set slot and publication in the source block.
