pipeline = "shop"

source "postgres" {
  dsn = 
}

# want: syntax_error.hcl:4:9: error: Invalid expression: Expected the start of an expression, but found an invalid expression token.
