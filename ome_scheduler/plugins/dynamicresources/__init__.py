"""DynamicResources: the plugin (``plugin.py``), the scheduler's DRA state (``manager.py``), a pod's
claims (``claims.py``) and the claim writes of the binding cycle (``binding.py``).

Mirrors ``pkg/scheduler/framework/plugins/dynamicresources/`` (v1.35.4); the structured allocator
it drives lives in ``ome_scheduler/dra/``. ``docs/design/dra.md`` says what is mirrored.
"""

from ome_scheduler.plugins.dynamicresources.plugin import DynamicResources

__all__ = ["DynamicResources"]
