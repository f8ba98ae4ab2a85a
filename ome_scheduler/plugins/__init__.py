"""In-tree plugins, one module per upstream plugin, plus OMEGangPack (``gangpack/``).

Lives here: one module per plugin of kube-scheduler 1.35's default profile, named as upstream
(``pkg/scheduler/framework/plugins/<name>``), whose docstring names the file it mirrors;
``registry.py`` (the in-tree registry and the default profile); what several plugins share
(``volumestore.py``, ``csitranslation.py``, ``helper.py``); ``gangpack/`` (OMEGangPack,
glossary in its ``__init__.py``); ``dynamicresources/`` (DynamicResources, with the scheduler's
DRA state in ``manager.py``, as ``volumestore.py`` holds the volume plugins'). Plugins see the
scheduler only through the framework's Handle: no I/O but through its ports, no runtime, no
scheduler.

May import: api, util, config, framework, dra, plugins, logs, metrics.
"""
