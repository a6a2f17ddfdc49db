"""The runtime: Coordinator, QueueRunner, ResourceMgr and Session."""
