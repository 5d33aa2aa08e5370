"""Fault-injection engines: each stands in for an engine that fails in one specific way."""
