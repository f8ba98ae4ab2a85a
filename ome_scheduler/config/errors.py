"""The configuration error type shared by flags, the config file and plugin arguments."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid flag, configuration file or plugin argument.

    The message names the offending argument the way kube-scheduler's validation does, for
    example ``profiles[0].pluginConfig[OMEGangPack].args: gcIntervalSeconds must be
    configured``; the process prints it and exits with status 1.
    """
