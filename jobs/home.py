"""A user with no home: a broker's system user (``--home-dir /nonexistent``), or ``sudo -u``
leaving ``HOME=/root``. kcompact needs no home; matplotlib, which draws the plan and the report,
wants a config dir and warns on every plot when the default one cannot be written."""

from __future__ import annotations

import os

from kcompact.kernels.cache import private_dir


def settle_matplotlib() -> None:
    """Point ``MPLCONFIGDIR`` at this user's private dir under the temp dir when neither it nor
    matplotlib's default (``$XDG_CONFIG_HOME`` or ``~/.config``, then ``matplotlib``) is usable, as
    matplotlib would decide before it warns; where that dir cannot be had either, matplotlib's own
    fallback (and warning) stands."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    default = os.path.join(base, "matplotlib")
    try:
        os.makedirs(default, exist_ok=True)
        if os.access(default, os.W_OK):
            return
    except OSError:
        pass
    own = private_dir("matplotlib")
    if own is not None:
        os.environ["MPLCONFIGDIR"] = own
