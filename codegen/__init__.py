"""dbgen: generates PyTorch autograd Functions whose higher-order derivatives are correct by construction.

Each folder is a stage of the pipeline or a tool beside it; a stage imports only from earlier
ones (tests/unit/test_layering.py keeps it so), and each hands its result down once:

    language/  the expression language: its names, the parser (text -> SymPy through an ``ast``
               allow-list), special and external functions, and the printer back to the language
    spec/      YAML (with line marks) -> a validated, frozen ``Spec``; its schema and [tool.dbgen]
    derive/    derivatives, vector-Jacobian products, stable rewrites, guards, the domain check
    plan/      a strategy -> what each generated Function computes, saves and returns; the cost
               model with which ``auto`` chooses
    emit/      plans -> module and test source (SymPy -> torch printer, Jinja templates, ruff)
    build/     the pipeline driving the stages per spec, the accuracy oracle, the memory bound,
               atomic writes and the staleness check
    tools/     bench, show, graph, scaffold (and audit/, its own package): readers of the stages
    cli/       the ``dbgen`` command, a thin shell over build/ and the tools

The modules at the top (errors, limits, signals, provenance, console) are the ground every stage
stands on.
"""

__version__ = "0.12.0"
