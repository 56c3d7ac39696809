"""The lab: a small real cluster on this machine, one podman container per node.

Each node runs systemd as PID 1 from a locally built Debian 13 image
(:mod:`railyard.lab.image`); rails and the management network are podman
networks. See the design notes, section "The lab: the embedded default".
"""

__all__ = ["IMAGE_REF", "ensure_image"]


def __getattr__(name: str):
    # Lazy, so that `python -m railyard.lab.image` does not import the module twice.
    if name in __all__:
        from railyard.lab import image

        return getattr(image, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
