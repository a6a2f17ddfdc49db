"""Decoders that turn records into numpy: raw bytes, CSV and tf.train.Example."""
