"""The ``KubeSchedulerConfiguration`` file: models, defaults, loading and validation.

Lives here: ``types.py`` (the v1 models), ``load.py`` (reading, defaulting, validating; errors
name the field), ``pluginargs.py`` and ``validation_pluginargs.py`` (typed plugin arguments and
upstream's validation texts), ``errors.py`` (:class:`ConfigError`). Below everything that runs.

May import: api, util, config.
"""
