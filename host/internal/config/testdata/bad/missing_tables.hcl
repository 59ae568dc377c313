pipeline = "shop"

source "postgres" {
  dsn = "postgres://localhost/shop"
}

# want: missing_tables.hcl:3:1: error: Missing tables: The source needs tables = ["public.orders", ...]: the schema-qualified tables to capture.
