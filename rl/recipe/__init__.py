"""Recipes: compose a verl-format recipe and check it against verl's schema."""
