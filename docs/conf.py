"""Sphinx configuration of the xpops documentation.

Build with ``sphinx-build -W --keep-going -b html docs docs/_build/html``. Nothing is fetched
from the network, at build time or when a page is read: there is no intersphinx, the theme
links only to local pages, and MathJax is copied into the site (sphinx-mathjax-offline).
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
    # MathJax served from the built site (_static/mathjax), not fetched from a CDN
    "sphinx-mathjax-offline",
]

# plots are drawn at build time from the code in the page (no files are fetched)
plot_formats = [("png", 110)]
plot_html_show_source_link = False
plot_html_show_formats = False

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
templates_path = ["_templates"]  # autosummary's page templates, with short page titles

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
    # the top bar holds this many page links (the short titles of index.md's toctrees) and a
    # "More" menu, on one line at 1280 px
    "header_links_before_dropdown": 4,
}
html_static_path: list[str] = []
