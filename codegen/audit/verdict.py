"""One Function audited in this process: the static findings, the dynamic checks run, and the
verdict they give (``audit``). ``isolation`` calls it in a worker per target.
"""

from __future__ import annotations

from dataclasses import replace

from . import dynamic, static
from .model import (
    LIMITED,
    NOT_CHECKABLE,
    OK,
    UNCHECKED,
    WRONG,
    Audit,
    Options,
    unchecked,
)
from .targets import Target


def audit(target: Target, options: Options) -> Audit:
    findings = static.check(target.cls)
    names = dynamic.input_names(target.cls)
    place = static.source_place(target.cls)
    if not names:
        return unchecked(target.name, "no inputs", (
            "forward takes no input (every parameter after ctx has a default, or there is none): there is "
            "nothing to differentiate; audit a Function of tensor inputs"), *place, findings)
    fixed = tuple((n, float(options.params[n])) for n in names if n in options.params)
    setup = dynamic.Setup(names, tuple(options.domains.get(n, dynamic.DEFAULT_DOMAIN) for n in names), options.shape,
                          numbers=tuple(n for n, _ in fixed), fixed=fixed)
    try:
        setup = _callable_setup(target.cls, setup)
    except Exception as exc:  # noqa: BLE001 - the user's Function, called with tensors it does not take
        summary = (f"raises when called with tensor inputs ({', '.join(names)}) drawn from {_domains(setup)}: "
                   f"{dynamic.first_line(exc)}; audit a Function whose forward takes tensors, give its other "
                   "arguments defaults, or give --domain where it is defined")
        return unchecked(target.name, "raises when called", summary, *place, findings, names)
    if len(setup.constant) + len(setup.numbers) == len(names):
        return unchecked(target.name, "no gradient", (
            f"backward returns no gradient (None) for any input ({', '.join(names)}): there is nothing to "
            "differentiate"), *place, findings, names)
    findings += _ungraded(target, setup)
    subject = dynamic.Subject(target.cls, setup)
    reference = _reference(options, setup) if options.expr else None
    results = [*dynamic.gradchecks(subject, options.order),
               *dynamic.order_checks(subject, options.order, reference),
               *dynamic.transform_checks(subject)]
    if options.dtype == "float32":
        results.append(dynamic.float32_check(subject, options.order))
    findings = _confirmed(findings, dynamic.stashed_on_ctx(subject), target)
    verdict, wrong_at, correct_to, summary = _verdict(findings, results, options.order)
    if verdict == UNCHECKED:
        summary += f"; the inputs were drawn from {_domains(setup)}"
        findings.append(static.Finding(*place, summary, static.ERROR, "audit"))
        return Audit(target.name, names, tuple(findings), tuple(results), verdict, wrong_at, correct_to, summary,
                     label=NOT_CHECKABLE)
    spec = None
    if options.expr:
        spec, why_not = _replacement(target, setup, options, results, (verdict, wrong_at, correct_to))
        if why_not:
            findings.append(static.Finding(*place, f"no replacing spec: {why_not}", static.NOTE, "spec"))
    return Audit(target.name, names, tuple(findings), tuple(results), verdict, wrong_at, correct_to, summary, spec)


def _replacement(target: Target, setup: dynamic.Setup, options: Options, results, found) -> tuple[str | None, str]:
    """(the spec replacing the Function, "") where its value is --expr's, else (None, why not).
    A Function wrong at some order is replaced all the same: that is what replacing it is for."""
    from .replacement import replacing_spec

    value = next((r for r in results if r.check == "expr order 0"), None)
    if value is None or value.status != dynamic.PASS:
        reason = value.reason if value is not None else "it was not compared"
        return None, (f"its value is not --expr's ({reason}): a replacement computes what the Function "
                      "computes; correct --expr (or give --params), then rerun")
    try:
        return replacing_spec(target, setup, options, found), ""
    except Exception as exc:  # noqa: BLE001 - the Function is audited all the same: say why no spec
        return None, str(exc)


def _domains(setup: dynamic.Setup) -> str:
    return ", ".join(f"{name} in [{lo:g}, {hi:g}]" for name, (lo, hi) in zip(setup.names, setup.domains))


def _callable_setup(cls: type, setup: dynamic.Setup) -> dynamic.Setup:
    """``setup`` as the Function can be called: every argument a tensor, else its last 1, 2, ...
    arguments Python numbers (params, such as dbgen's own, which torch ops take as numbers); with the
    inputs backward returns no gradient for, and those of them at the end passed as numbers too, as
    its callers pass params. Raises what the all-tensor call raised."""
    probed = _probed(cls, setup)
    count = 0
    while count < len(probed.names) - 1 and probed.names[-1 - count] in {*probed.constant, *probed.numbers}:
        count += 1
    trailing = probed.names[len(probed.names) - count:]
    if not count or set(trailing) <= set(probed.numbers):
        return probed
    numbered = replace(probed, numbers=_numbers(probed, trailing),
                       constant=tuple(n for n in probed.constant if n not in trailing))
    try:
        dynamic.ungraded_inputs(cls, numbered)
    except Exception:  # noqa: BLE001 - it wants tensors there after all
        return probed
    return numbered


def _numbers(setup: dynamic.Setup, more) -> tuple[str, ...]:
    """The setup's numbers (those --params gives) and ``more``, in argument order."""
    return tuple(n for n in setup.names if n in setup.numbers or n in more)


def _probed(cls: type, setup: dynamic.Setup) -> dynamic.Setup:
    try:
        return replace(setup, constant=dynamic.ungraded_inputs(cls, setup))
    except Exception:  # the user's Function: retried with numbers, re-raised if nothing works
        for count in range(1, len(setup.names)):
            numbered = replace(setup, numbers=_numbers(setup, setup.names[-count:]))
            try:
                return replace(numbered, constant=dynamic.ungraded_inputs(cls, numbered))
            except Exception:  # noqa: BLE001,S112 - try one more number
                continue
        raise  # what the all-tensor call raised


def _ungraded(target: Target, setup: dynamic.Setup) -> list[static.Finding]:
    """A finding for each input backward returns None for: differentiated in no check (as a mask,
    an index or a param), and worth a look when it is something someone trains."""
    return [static.Finding(*static.source_place(target.cls), (
        f"backward returns no gradient for {name} (None; the checks {how}): if a tensor is ever passed there "
        "to be trained, its gradient is silently missing"), static.LIMIT, "static")
        for names, how in ((setup.constant, "hold it constant"), (setup.numbers, "pass it a number"))
        for name in names]


def _reference(options: Options, setup: dynamic.Setup):
    """Autograd through ``--expr`` in torch ops, as dbgen's generated tests write it: a function
    of the Function's tensor inputs, its numbers (and the other --params) as params."""
    from .replacement import expr_params, formula_function

    return formula_function(options.expr, setup.tensor_names, options.order, expr_params(setup, options))


def _confirmed(findings: list[static.Finding], stashed: dict[str, str], target: Target) -> list[static.Finding]:
    """The static findings, a ctx attribute seen to hold a tensor at run time said so (one that holds
    the call's own output is a reference cycle, not a wrong derivative), and one the source did not
    show (set through a helper) added."""
    confirmed, seen = [], set()
    for finding in findings:
        attribute = finding.attribute
        if stashed.get(attribute) in ("constant input", "no tensor"):
            continue  # a number at run time, or an input held constant (its own finding says so)
        if stashed.get(attribute) == "output":
            finding = static.Finding(finding.file, finding.line, (
                f"ctx.{attribute} holds the output itself: autograd keeps its graph, so the derivatives are "
                "right, but ctx -> output -> its grad_fn -> ctx is a reference cycle that frees memory only "
                "at garbage collection; use ctx.save_for_backward"), static.LIMIT, finding.check, attribute)
            seen.add(attribute)
        elif attribute in stashed:
            finding = replace(finding, message=finding.message + "; it held a tensor at run time")
            seen.add(attribute)
        confirmed.append(finding)
    for attribute, kind in stashed.items():
        if attribute not in seen and kind == "tensor":
            confirmed.append(static.Finding(*static.source_place(target.cls), (
                f"ctx.{attribute} held a tensor at run time: a tensor kept on ctx is a constant to autograd at "
                "the next order (the tutorial's SinhBad); use ctx.save_for_backward"), check="static",
                attribute=attribute))
    return confirmed


def _verdict(findings, results, order: int) -> tuple[str, int | None, int, str]:
    """(verdict, wrong_at_order, correct_to_order, a one-line summary). An order that could not be
    compared (n/a: not finite, or not smooth, at the drawn points) is not counted correct: where one
    comes before any order that raises, the verdict is unchecked (give --domain), never ok."""
    wrong = [r for r in results if r.status == dynamic.WRONG]
    wrong_at = min((r.order for r in wrong if r.order is not None), default=None) if wrong else None
    failed_orders = [int(r.check.split()[-1]) for r in results
                     if r.check.startswith("order ") and r.status == dynamic.FAIL]
    not_compared = sorted((int(r.check.split()[-1]), r.reason) for r in results
                          if r.check.startswith(("order ", "expr order ")) and r.status == dynamic.NOT_APPLICABLE)
    first_bad = min([o for o in (wrong_at, *failed_orders) if o is not None], default=order + 1)
    correct_to = min(first_bad - 1, order)
    if wrong:
        wrong_at = wrong_at if wrong_at is not None else 1
        against_expr = all(r.check.startswith("expr") for r in wrong if r.order == wrong_at)
        summary = (f"differs from --expr from order {wrong_at}" if against_expr
                   else f"silently wrong at order {wrong_at}")
        return WRONG, wrong_at, correct_to, summary
    if not_compared and not_compared[0][0] < first_bad:
        k, reason = not_compared[0]
        correct_to = max(k - 1, 0)
        shown = f"order {k}" if k else "the value"
        checked = f"correct to order {correct_to}, " if correct_to else ""
        return UNCHECKED, None, correct_to, (f"{NOT_CHECKABLE}: {checked}{shown} could not be checked ({reason})")
    limits = [r.check for r in results if r.status == dynamic.FAIL]
    static_limits = [f for f in findings if f.kind == static.LIMIT]
    if limits or static_limits:
        parts = [f"correct to order {correct_to}"]
        if failed_orders:
            parts.append(f"order {min(failed_orders)} raises")
        refused = [c for c in limits if c in dynamic.TRANSFORMS]
        if refused:
            parts.append("not torch.func-ready" if set(refused) - {"compile"} else "no torch.compile fullgraph")
        if "float32" in limits:
            parts.append("imprecise in float32")
        return LIMITED, None, correct_to, "; ".join(parts)
    return OK, None, correct_to, f"correct to order {correct_to}"
