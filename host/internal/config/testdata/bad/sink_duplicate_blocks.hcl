pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "webhook" "billing" {
  delivery {
  }
  delivery {
  }
  config {
  }
  config {
  }
}

# want: sink_duplicate_blocks.hcl:11:3: error: Duplicate delivery block: A sink has at most one delivery block; the first is at line 9.
# want: sink_duplicate_blocks.hcl:15:3: error: Duplicate config block: A sink has at most one config block; the first is at line 13.
