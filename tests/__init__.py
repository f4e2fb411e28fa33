"""The project's own tests, grouped in folders by what they exercise (see docs/testing.md);
a package, so helpers such as ``tests.support.digest`` can be imported."""
