pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "webhook" "billing" {
  tables = ["public.orders", "public.invoices"]
}

sink "webhook" "audit" {
  tables = []
}

# want: sink_tables.hcl:9:30: error: Table not captured: Table "public.invoices" is not among the source tables (public.orders, public.customers), so this sink would never see it.
# want: sink_tables.hcl:13:12: error: Empty tables filter: An empty filter would deliver nothing; remove tables to deliver every source table.
