pipeline = "shop"

source "postgres" {
  dsn    = env("WALCAST_TEST_EMPTY")
  tables = ["public.orders"]
}

# want: empty_dsn.hcl:4:12: error: Empty dsn: The source needs a PostgreSQL connection string; if it comes from env(), that variable is set but empty.
