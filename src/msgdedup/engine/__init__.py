"""The Spark implementation of the dedup semantics."""
