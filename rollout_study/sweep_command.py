"""`rollout-study sweep`: validate a sweep file, run its points (local or Ray), repeat the sampled
points alone, build the report, and name the folder; the steps live in sweep.py and repeats.py."""
from __future__ import annotations

from pathlib import Path

from .params import ParameterError

DESCRIPTION = (
    "One study per point of a sweep file, each in a fresh process, then the sweep's report (report: hazards, "
    "the update-path matrix; or sweep, curves over batch size and new tokens per model). Keys of the file: name, "
    "report, sweep (parameter -> list of values, or of mappings of parameters that go together), repeat_alone (N "
    "points run again one at a time after the sweep, to tell whether running side by side moved them), and any "
    "StudyParams field shared by every point. Writes runs/<name>-<time>/ with sweep.json (points, wall time), "
    "points/, repeats/, summary.md and report.html.")

def command(args) -> list[str]:
    """`rollout-study sweep`: validate, run the points (local or Ray), build the report; returns the problems."""
    from . import pipeline, publish, repeats
    from .files import writable
    from .pipeline import say
    from .sweep import SWEEP_FILE, SweepSpec, load, point_problems, run_local, run_ray, validity_problems

    spec = SweepSpec.from_yaml(args.sweep_file)  # every point validated before any runs
    if args.executor == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ParameterError("--executor ray needs the ray package (pip install ray==2.60.0); allowed "
                                 "without it: --executor local")
    elif args.address:
        raise ParameterError("--address needs --executor ray")
    publish.check_name(spec.name, "name")
    if args.into:  # resume: points with a result from the same code in the folder are not run again (sweep.kept_status)
        folder = Path(args.into).resolve()
        if not (folder / SWEEP_FILE).is_file():
            raise ParameterError(f"--into {args.into!r}: not a sweep folder (no {SWEEP_FILE})")
        earlier = load(folder)[0]["spec"]
        if (earlier.get("name"), earlier.get("report")) != (spec.name, spec.report):
            raise ParameterError(f"--into {args.into!r}: that folder holds sweep {earlier.get('name')!r}, "
                                 f"not {spec.name!r}; allowed: a folder of the same sweep")
    else:
        problem = writable(Path(args.output_root) / "probe.json")
        if problem:
            raise ParameterError(f"--output-root {args.output_root!r}: {problem}")
        folder = publish.start_run(Path(args.output_root).resolve(), spec.name)
    try:
        if args.executor == "ray":
            run_ray(spec, folder, address=args.address, progress=not args.quiet)
        else:
            run_local(spec, folder, progress=not args.quiet)
        if spec.repeat_alone:
            repeats.run(spec, folder, progress=not args.quiet)
    except BaseException:
        say(f"interrupted; finished points are kept in {folder} (resume with --into)")
        raise
    with pipeline.kernel_environment():
        problems = pipeline.sweep_report_step(folder, spec.report, progress=not args.quiet)
    if not args.into or folder.name.startswith(f".{spec.name}.partial-"):  # a resumed hidden partial folder too
        folder = publish.finish_run(folder, spec.name)
    publish.write_index(folder.parent)
    problems += validity_problems(folder)
    say(f"sweep folder: {folder}")
    findings = point_problems(load(folder)[1]) if spec.report == "sweep" else []
    if findings:  # a curve sweep's failed and invalid points are its findings, not errors: said all the same
        say(f"{len(findings)} point(s) failed or are invalid (listed in the report, never plotted); first: {findings[0]}")
    for problem in problems:
        say(f"error: {problem}")
    return problems
