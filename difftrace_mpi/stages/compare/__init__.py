"""Comparing two runs' traces: twins, order folding, the first divergence, the NLR diff."""
