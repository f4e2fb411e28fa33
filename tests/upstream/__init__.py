"""Compatibility with upstream hermes-agent: its files of every schema, its transcript, its own
code.
"""
