"""Exactly-once delivery for message exports."""
