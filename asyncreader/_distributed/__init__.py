"""Scale-out on Ray: queues shared by every process of a job (``asyncreader[ray]``).

Ray is imported only here, lazily: ``import asyncreader`` never imports it.
"""
