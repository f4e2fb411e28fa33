"""The watcher in-process on real stores: its pipeline, flushes, limits, wake-ups, turns and
supervision.
"""
