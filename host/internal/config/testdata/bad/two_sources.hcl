pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

# want: two_sources.hcl:8:1: error: Duplicate source block: A pipeline has exactly one source; the first is at line 3.
