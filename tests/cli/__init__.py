"""The hermes-state command line and the dashboard: in-process through main(), and through the
real console script.
"""
