pipeline = "shop"

# want: no_source.hcl:1:1: error: Missing source block: A pipeline captures from exactly one source "postgres" { ... } block.
