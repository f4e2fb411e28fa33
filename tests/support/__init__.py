"""Helpers the tests share: real processes, stores, digests, wire traces, upstream files, crash
points, the mutation check.
"""
