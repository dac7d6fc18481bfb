"""consensus package."""
