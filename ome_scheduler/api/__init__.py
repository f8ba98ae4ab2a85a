"""Typed API records decoded straight from the API server's JSON, and the snapshot file format.

Lives here: ``core.py`` (Pod, Node, Namespace and the volume objects), ``storage.py``
(CSINode, VolumeAttachment), ``scheduling.py`` (PodGroup and the scheduler's ``ome.io/*``
annotations), ``resource.py`` (ResourceClaim, ResourceSlice and DeviceClass of
``resource.k8s.io/v1``), ``meta.py`` (ObjectMeta, label
selectors), ``snapshot.py`` (the file ``ome-scheduler snapshot`` writes). msgspec Structs with
only the fields the scheduler reads; no I/O, no scheduling logic.

May import: api.
"""
