pipeline = "shop"
version  = 2

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
  table  = "public.customers"
}

filter {}

# want: unknown_attribute_block.hcl:2:1: error: Unsupported argument: An argument named "version" is not expected here.
# want: unknown_attribute_block.hcl:7:3: error: Unsupported argument: An argument named "table" is not expected here.
# want: unknown_attribute_block.hcl:10:1: error: Unsupported block type: Blocks of type "filter" are not expected here.
