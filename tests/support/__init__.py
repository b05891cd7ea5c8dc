"""What the tests share: free ports, bounded waiting (more to move here: issue "one skeleton").

Imported as ``support`` (tests/ is on the path through pytest.ini's ``pythonpath``), never through
``sys.path`` edits in test modules.
"""
