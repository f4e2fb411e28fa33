"""The package itself: its layout, imports, packaging, declared surface, generated files and
documentation.
"""
