"""The store on every backend, in-process: transitions, ownership, leases, reads, engines,
errors, plans and round trips.
"""
