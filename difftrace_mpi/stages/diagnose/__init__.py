"""Diagnosis: the verdict and its criteria, the failed run alone, hangs, messages, timing."""
