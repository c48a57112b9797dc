"""Filter and score plugins, one module each, listed in extender.scheduling.registry.

Each module has a NAME and a class implementing extender.core.plugins.FilterPlugin and/or
ScorePlugin; extender.scheduling.verbs runs them. The gang feature's filter lives with the
rest of that feature (extender.gang).
"""
