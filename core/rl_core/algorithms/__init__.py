"""Built-in algorithms (filled by the algorithm library)."""
