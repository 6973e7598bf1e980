"""One module per algorithm; each reads top to bottom in the order of the algorithm."""
