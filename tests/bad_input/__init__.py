"""The bad-input corpus: one folder per hostile log, with the outcome it must have.

Each scenario folder holds ``build.py`` (a ``build(log_dir)`` function that
writes the log, usually through :mod:`tests.bad_input.kit`) and
``expected.json`` (the outcome; its keys are described in ``kit.Expected``).
``tests/read/test_bad_input.py`` turns every folder into a test case, so adding a
regression case is adding a folder.
"""
