"""The Alembic migrations, adoption of pre-Alembic files, downgrades, and promotion to a
server.
"""
