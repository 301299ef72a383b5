"""Scopes: which limits a request counts against, managers, patterns, servers."""
