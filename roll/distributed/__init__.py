"""The distributed runtime: where roles run and how they talk.

- :mod:`roll.distributed.resource_pool`: AutoDeviceMapping. ``parse_device_mapping``,
  ``make_plan`` / ``validate_plan`` / ``print_plan`` (``roll plan``), ``ResourcePool`` (Ray
  placement groups, ``worker_slots(role)``).
- :mod:`roll.distributed.cluster`: ``Cluster(role, worker_cls, worker_config, pool)``, N Ray
  actors of one role; ``call`` / ``call_async`` with dispatch modes ``all`` / ``dp`` /
  ``rank0``; ``WorkerDiedError`` / ``CallTimeoutError`` name role and rank; restarts.
- :mod:`roll.distributed.model_update`: ``ModelUpdateGroup(train_cluster, infer_clusters,
  bucket_size_mb).update(version)``, colocated (shared memory / CUDA IPC) and broadcast
  (gloo / NCCL) paths.

Submodules are imported on use (``import roll.distributed.cluster``); planning a config
(`roll plan`) starts no Ray cluster.
"""
