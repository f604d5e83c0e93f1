"""Fakes of external services for tests."""
