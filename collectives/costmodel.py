"""Placeholder replaced below."""
def choose(comm, nbytes):
    return "ring" if nbytes > 65536 else "recursive_doubling"
