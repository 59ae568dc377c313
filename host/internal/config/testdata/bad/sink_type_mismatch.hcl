pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "webhook" "billing" {
  durable = "maybe"
  delivery {
    batch_size = "many"
  }
}

# want: sink_type_mismatch.hcl:9:13: error: Incorrect attribute value type: Inappropriate value for attribute "durable": a bool is required.
# want: sink_type_mismatch.hcl:11:18: error: Incorrect attribute value type: Inappropriate value for attribute "batch_size": a number is required.
