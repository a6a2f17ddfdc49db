"""Sans-I/O record framing (TFRecord, lines, fixed-length records) and compression."""
