"""Stage 5, emit: plans -> Python source.

``printer`` prints SymPy as torch calls; ``render`` lays out the module and its tests through the
Jinja templates and formats them with ruff.
"""
