"""The ``exosuit`` command line (cliff): one module per noun, ``COMMANDS`` in app.py.

How to add a command (``exosuit image list``, say):

1. In the noun's module (``exosuit/cli/images.py``), a class: a ``ListCommand`` with
   ``path``, ``key``, ``columns`` (the API's field names), ``sort_keys`` and
   ``filters``; a ``ShowCommand`` whose ``item()`` returns the object; or a plain
   cliff ``Lister``/``ShowOne``/``Command`` with ``ApiCommand`` mixed in for
   ``self.api``. ``needs = "2.x"`` if it needs a microversion. The docstring's first
   line is its one-line help.
2. One line in ``COMMANDS`` (app.py): ``"image list": images.ImageList``.
3. ``python -m exosuit.cli.reference --write`` (doc/cli.md), and tests in tests/cli/
   against a real ``exosuit serve``.
"""
