"""Storage: the segmented log, its indexes and checkpoints, and the formatting of log directories."""
