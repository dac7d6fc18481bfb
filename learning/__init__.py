"""learning package."""
