"""Root conftest: keep doctest collection away from modules that need a GPU library."""

import importlib.util

collect_ignore_glob = ["docs/*", ".gpu/*"]
if importlib.util.find_spec("cupy") is None:
    collect_ignore_glob.append("xpops/_cupy/*")
