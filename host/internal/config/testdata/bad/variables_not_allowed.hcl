pipeline = var.name

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

# want: variables_not_allowed.hcl:1:12: error: Variables not allowed: Variables may not be used here.
