pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "stdout" "debug" {
  durable   = false
  batchsize = 10
  delivery {
    retries = 3
  }
}

# want: sink_unknown_attribute.hcl:10:3: error: Unsupported argument: An argument named "batchsize" is not expected here.
# want: sink_unknown_attribute.hcl:12:5: error: Unsupported argument: An argument named "retries" is not expected here.
