"""dbgen: generates PyTorch autograd Functions whose higher-order derivatives are correct by construction.

The pipeline, one module per stage, data flowing one way:

    spec.py      YAML (with line marks) -> validated, frozen ``Spec``
    expr.py      expression text -> SymPy, through an ``ast`` allow-list
    symbolic.py  derivatives, vector-Jacobian products, rewrites in terms of saved values
    plan.py      strategy -> what each generated Function computes, saves and returns
    cost.py      the cost model with which ``auto`` chooses a strategy
    printer.py   SymPy -> torch source
    render.py    plans -> module and test source (Jinja templates), formatted by ruff
    write.py     atomic, deterministic writes and the staleness check
    provenance.py  the generated header and its seal; signals.py: signals held during a swap
    cli.py       the ``dbgen`` command, a thin shell over ``pipeline.py``
"""

__version__ = "0.12.0"
