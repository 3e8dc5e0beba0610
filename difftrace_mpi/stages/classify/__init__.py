"""Classification: attribute rows, JSMs, classes, concept lattices, clusters, the ranking."""
