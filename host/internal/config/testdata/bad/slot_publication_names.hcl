pipeline = "shop"

source "postgres" {
  dsn         = "postgres://localhost/shop"
  tables      = ["public.orders"]
  slot        = "Walcast-Shop"
  publication = "pppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp"
}

# want: slot_publication_names.hcl:6:17: error: Invalid slot name: The slot name "Walcast-Shop" contains 'W'; use only lower-case letters, digits and underscores.
# want: slot_publication_names.hcl:7:17: error: Invalid publication name: The publication name "pppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp" is 64 characters long; PostgreSQL allows at most 63.
