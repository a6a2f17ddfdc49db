"""Readers: async resources that turn work items into (key, value) records."""
