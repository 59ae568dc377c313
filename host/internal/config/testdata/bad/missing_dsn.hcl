pipeline = "shop"

source "postgres" {
  tables = ["public.orders"]
}

# want: missing_dsn.hcl:3:1: error: Missing dsn: The source needs dsn = "postgres://user@host/db", usually dsn = env("WALCAST_SOURCE_DSN") to keep the password out of the file.
