"""In-tree plugins, one module per upstream plugin, plus OMEGangPack (``gangpack/``)."""
