"""Input producers and batching.

``producers`` holds the queues that are refilled epoch after epoch (file names, indices,
rows of arrays); ``batching`` holds ``batch`` / ``shuffle_batch`` and their variants, which
turn an example source into batches through a queue and a QueueRunner. ``_structure`` maps
user examples (tuples, dicts, lists, single values) to queue components and back.
"""
