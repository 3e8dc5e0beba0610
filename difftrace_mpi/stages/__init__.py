"""The functional core: plain functions over numpy arrays, grouped by job.

model/     the trace model (filters, call trees and time steps, NLR loops, global ids)
compare/   two runs side by side (twins, order folding, the first divergence, the NLR diff)
classify/  attribute rows, JSMs, classes, concept lattices, clusters, the ranking
diagnose/  the verdict and its criteria, the failed run alone, hangs, messages, timing

A package imports only from those above it in this list (and ``classify`` not from
``compare``); tests/test_layering.py checks it."""
