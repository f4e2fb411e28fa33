"""Real processes racing and dying: exactly-once claims, contention, SIGKILLs, watchers and
gateways as processes.
"""
