pipeline = "shop"

source "postgres" {
  dsn = "postgres://localhost/shop"
  tables = [
    "public.orders.x",
    ".orders",
    "public.",
    "public.*",
    "public.\"Orders\"",
  ]
}

# want: table_forms.hcl:6:5: error: Invalid table name: Table "public.orders.x" is not of the form "schema.table".
# want: table_forms.hcl:7:5: error: Invalid table name: Table ".orders" is not of the form "schema.table".
# want: table_forms.hcl:8:5: error: Invalid table name: Table "public." is not of the form "schema.table".
# want: table_forms.hcl:9:5: error: Invalid table name: Table "public.*" contains a wildcard; list every table to capture by name.
# want: table_forms.hcl:10:5: error: Invalid table name: Table "public.\"Orders\"" contains quotes or spaces; write schema.table as spelled in the catalog, without quotes.
