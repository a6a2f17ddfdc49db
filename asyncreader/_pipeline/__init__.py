"""Input producers and batching: the top of the input pipeline, above readers and queues.

Producers (queues refilled epoch after epoch with file names, indices or rows of arrays):
``producers`` holds the public functions, ``slice_input_producer`` and ``limit_epochs``;
``input_producer`` the :class:`InputProducer` op behind each, with its checkpoints.

Batching (examples in, batches out through a queue and a QueueRunner): ``batching`` holds
``batch`` / ``shuffle_batch`` and their variants, which describe the request in a
``BatchSpec``; ``batcher`` the :class:`Batcher` built from it (its queue, runner and
checkpoints); ``sources`` the example-source adapter and the enqueue step.

Parallel map: ``map`` holds :func:`map` and the :class:`MapStage` it returns, a source that
applies a function to another source's examples with calls in flight on the loop, worker
threads or worker processes.

``structure`` maps user examples (tuples, dicts, lists, single values) to queue components
and back; ``common`` finds the Coordinator a producer or batcher runs in.
"""
