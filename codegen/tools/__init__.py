"""The tools beside the pipeline: ``bench`` (timings and op counts), ``show`` (a spec's plan),
``graph`` (the autograd graph a Function builds) and ``scaffold`` (``dbgen new``). Each reads the
pipeline's results; no stage imports a tool.
"""
