"""Numba's compiled kernels shipped inside the package, and where a process finds them (``cache``)."""
