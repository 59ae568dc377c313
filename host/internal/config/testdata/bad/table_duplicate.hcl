pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.orders"]
}

# want: table_duplicate.hcl:5:30: error: Duplicate table: Table "public.orders" is already listed at line 5.
