"""Sphinx configuration of the xpops documentation.

Build with ``sphinx-build -W --keep-going -b html docs docs/_build/html``. Nothing is fetched
from the network: there is no intersphinx, and the theme links only to local pages.
"""

import xpops

project = "xpops"
author = "xpops developers"
copyright = "xpops developers"
version = xpops.__version__
release = xpops.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_parser",
    "matplotlib.sphinxext.plot_directive",
]

# plots are drawn at build time from the code in the page (no files are fetched)
plot_formats = [("png", 110)]
plot_html_show_source_link = False
plot_html_show_formats = False

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# autodoc / autosummary: the stubs are generated into docs/api/generated/ (git-ignored).
autosummary_generate = True
autodoc_typehints = "none"  # the numpydoc Parameters sections carry the types

# numpydoc
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# MyST
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

# HTML
html_theme = "pydata_sphinx_theme"
html_title = f"xpops {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []
