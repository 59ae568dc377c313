pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "customers"]
}

# want: table_unqualified.hcl:5:30: error: Invalid table name: Table "customers" must be schema-qualified, as in "public.customers".
