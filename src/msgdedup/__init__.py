"""Exactly-once delivery for message exports: broker-style duplicate detection on Spark."""

__version__ = "0.1.0"
