"""Async queues: FIFO, random-shuffle, padding and priority."""
