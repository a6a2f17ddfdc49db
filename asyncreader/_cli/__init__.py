"""The ``asyncreader`` command line tool."""
