"""Input producers and batching."""
