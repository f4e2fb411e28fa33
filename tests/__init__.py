"""The project's own tests (a package, so helpers such as ``tests.digest`` can be imported)."""
