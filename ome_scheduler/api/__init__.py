"""Typed API records decoded straight from the API server's JSON (no I/O here)."""
