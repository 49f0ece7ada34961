"""Registers the built-in estimators and policy losses through the public hooks."""
