"""Mitogen's free strategy, from the installed ``mitogen`` package (requirements.txt).

ansible.cfg and the molecule base config point ``strategy_plugins`` here, so every
railyard play finds ``mitogen_free`` without a path into site-packages. With it active,
Mitogen also serves the podman, ssh and local connections (its own transports of those
names): one Python interpreter per host for the whole play instead of one per task.
"""

from ansible_mitogen.plugins.strategy.mitogen_free import StrategyModule  # noqa: F401
