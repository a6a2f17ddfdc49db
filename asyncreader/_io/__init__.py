"""I/O plumbing: the shared executor, filesystems and checksums."""
