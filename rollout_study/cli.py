"""The command line: `python -m rollout_study {run,bench,sweep,report,...} ...` (or `rollout-study`).

    run      the study and report notebooks for one parameter file, into a new folder under runs/
    bench    the study alone, in this process, into one result JSON (the original benchmark's flags)
    sweep    one study per point of a sweep file (fresh processes), then its report (hazards or sweep)
    report   rebuild a folder's summary, report notebook, figures and HTML from its result.json
    summary  the console summary of a result file (--markdown: summary.md)
    publish  copy a finished run folder into reports/ (never a CPU result over a GPU one)
    compare  two result files: the same workload? the same tokens, call by call? (two sweep folders:
             their wall times, executors, GPUs and the ratio; the points both finished, token by token)

`run` and `bench` take the same parameters: a YAML file, then `--set key=value` or `-p key value`
for any parameter, or a flag per parameter (`--requests 8`). Every value is validated by
`StudyParams` before anything runs or is written. Exit status: 0 done and valid; 1 the run
finished but a parity check, a phase or a notebook failed; 2 bad input, nothing written.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .cli_params import PARAMS_DIR, default_params_file, parameter_arguments, params_from, preflight
from .files import save, writable
from .param_values import ParameterError
from .pipeline import say

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _command(argv: list[str]) -> str:
    return "python -m rollout_study " + shlex.join(argv)


# -- commands ---------------------------------------------------------------------------------
def cmd_bench(args, argv: list[str]) -> int:
    from .launch import run_study
    from .present import text

    params = params_from(args)
    output = Path(args.output)
    problem = writable(output)
    if problem:
        raise ParameterError(f"--output {args.output!r}: {problem}")
    preflight(params)  # after the quick checks: it reads the tokenizer (seconds)
    result = run_study(params, progress=not args.quiet, command=_command(argv))
    written = save(result, output)
    if not args.quiet or written != output:
        print(text.console_summary(result))
    if written != output:
        say(f"error: could not write {output}; the result was saved to {written} instead")
        return EXIT_FAILED
    if not args.quiet:
        print(f"wrote {output}")
    if not result.is_valid:
        say(text.invalid_summary(result))
        return EXIT_FAILED
    return EXIT_OK


def cmd_run(args, argv: list[str]) -> int:
    from . import pipeline, publish

    params = params_from(args)
    publish.check_name(params.name, "name")
    params.resolved_device()  # cuda without a GPU is refused here, not inside the notebook
    runs_root = Path(args.output_root).resolve()
    problem = writable(runs_root / "probe.json")
    if problem:
        raise ParameterError(f"--output-root {args.output_root!r}: {problem}")
    preflight(params)  # after the quick checks: it reads the tokenizer (seconds)
    partial = publish.start_run(runs_root, params.name)
    problems: list[str] = []
    shown = "the run folder (renamed when the run ends: 'run folder:' below)"  # a failure is said before that
    try:
        with pipeline.kernel_environment():
            say(f"[1/2] study notebook -> {partial / 'study.ipynb'}")
            problems += pipeline.study_step(partial, params.to_dict(), _command(argv), progress=not args.quiet,
                                            folder_shown=shown)
            if (partial / "result.json").exists():
                say(f"[2/2] report notebook -> {partial / 'report.ipynb'}")
                problems += pipeline.report_step(partial, progress=not args.quiet, folder_shown=shown)
            else:
                say("no result.json: the report is skipped")
    except BaseException:
        if (partial / "result.json").is_file():  # the study finished: its result is never thrown away
            say(f"interrupted; the result is kept in {publish.finish_run(partial, params.name + '-interrupted')}")
        else:
            import shutil

            shutil.rmtree(partial, ignore_errors=True)  # an interrupted study leaves nothing half-written
        raise
    folder = publish.finish_run(partial, params.name)
    index = publish.write_index(runs_root)
    say(f"run folder: {folder}\nindex: {index}")
    if (folder / "result.json").exists():
        from .present import text
        from .result import Result

        say(text.headline_text(Result.read(folder / "result.json")))
    if problems:
        say(f"run failed: {len(problems)} problem(s), each reported above as 'error:'")
        return EXIT_FAILED
    say(f"to publish it: python -m rollout_study publish {pipeline.relative(folder)}")
    return EXIT_OK


def cmd_sweep(args, argv: list[str]) -> int:
    from .sweep_command import command

    return EXIT_FAILED if command(args) else EXIT_OK


def cmd_report(args, argv: list[str]) -> int:
    from .report_command import command

    return command(args)


def result_file(command: str, given: str, sweeps: bool = False) -> Path:
    """A command's result-file argument, where it is one; a folder or a missing path is named with what is allowed
    (else the OS's bare "[Errno 21] Is a directory", naming no argument). sweeps: the command takes sweep folders
    too (a folder here has no sweep.json)."""
    path = Path(given)
    if path.is_dir():
        inside = (f", such as {str(path / 'result.json')!r} (it holds one: name it)" if (path / "result.json").is_file()
                  else f" (a sweep's are its points/*.json; its summary is {str(path / 'summary.md')!r})"
                  if (path / "sweep.json").is_file() else "")
        raise ParameterError(f"{command}: {str(path)!r} is a folder{' without sweep.json' if sweeps else ''}; "
                             f"allowed: a result file{inside}{', or a sweep folder' if sweeps else ''}")
    if not path.is_file():
        raise ParameterError(f"{command}: {str(path)!r} does not exist; allowed: a result file"
                             f"{' or a sweep folder' if sweeps else ''}")
    return path


def cmd_summary(args, argv: list[str]) -> int:
    from .present import markdown, text
    from .result import Result

    result = Result.read(result_file("summary", args.result))
    sys.stdout.write(markdown.summary(result) if args.markdown else text.console_summary(result) + "\n")
    return EXIT_OK


def cmd_compare(args, argv: list[str]) -> int:
    from .compare import compare, compare_sweeps
    from .result import Result

    sweeps = [(Path(p) / "sweep.json").is_file() for p in (args.a, args.b)]
    if any(sweeps):
        if not all(sweeps):
            raise ParameterError(f"compare: {args.a!r} and {args.b!r} must both be sweep folders (with sweep.json) "
                                 "or both result files")
        comparison = compare_sweeps(args.a, args.b)
        print(comparison.text())
        return EXIT_OK if comparison.agrees else EXIT_FAILED
    a, b = (result_file("compare", path, sweeps=True) for path in (args.a, args.b))  # both, before either is read
    comparison = compare(Result.read(a), Result.read(b))
    print(comparison.text())
    return EXIT_OK if comparison.same_workload and comparison.tokens_match else EXIT_FAILED


def cmd_publish(args, argv: list[str]) -> int:
    from . import publish

    problem = writable(Path(args.reports_root) / "index.html")  # before any work, naming the option
    if problem:
        raise ParameterError(f"--reports-root {args.reports_root!r}: {problem}")
    target = publish.publish(args.run_folder, args.reports_root, args.name)
    say(f"published: {target}\nindex: {Path(args.reports_root) / 'index.html'}")
    return EXIT_OK


# -- parser -----------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m rollout_study", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True,
                                  metavar="{run,bench,sweep,report,summary,publish,compare}")
    run = commands.add_parser("run", help="study + report notebooks into a new folder under runs/")
    run.add_argument("params_file", nargs="?", default=None,
                     help="YAML parameter file (default: reference-tiny with CUDA, else cpu-smoke)")
    run.add_argument("--output-root", default=str(Path(PARAMS_DIR.parent, "runs")),
                     help="folder of run folders (default: runs/ in the repository, git-ignored)")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    parameter_arguments(run, default_file=True)
    bench = commands.add_parser("bench", help="the study alone, into one result JSON")
    bench.add_argument("params_file", nargs="?", default=None, help="YAML parameter file (default: the defaults)")
    bench.add_argument("--output", default="rollout-first-call.json", help="result JSON path")
    bench.add_argument("--no-profile", action="store_true", help="skip the profiled call per engine")
    bench.add_argument("--quiet", action="store_true", help="no progress bar and no summary table")
    parameter_arguments(bench)
    from .sweep_command import DESCRIPTION

    sweep = commands.add_parser("sweep", help="a sweep file: one study per point, then its report",
                                description=DESCRIPTION)
    sweep.add_argument("sweep_file", help="YAML with a 'sweep:' mapping of parameters to lists, e.g. "
                                          "params/sweep-h200.yaml")
    sweep.add_argument("--output-root", default=str(Path(PARAMS_DIR.parent, "runs")), help="default: runs/")
    sweep.add_argument("--into", default=None, help="an earlier sweep folder to resume (a point's result from "
                       "the same code is kept, invalid for parity included; a failed point runs again)")
    sweep.add_argument("--keep-from", action="append", default=[], metavar="FOLDER",
                       help="another sweep's folder (a subset of this one: a smoke run of its corner, one "
                       "model's points): results of points with the same parameters are copied in and kept "
                       "as on resume; its wall time joins this sweep's. Repeatable")
    sweep.add_argument("--executor", choices=("local", "ray"), default="local",
                       help="local: one point after another; ray: one point per GPU as Ray tasks")
    sweep.add_argument("--address", default=None, help="with --executor ray: an existing cluster, HOST:PORT of its "
                                                       "head, auto, or ray://HOST:PORT with Ray's client installed "
                                                       "(default: a local instance started for the sweep)")
    sweep.add_argument("--quiet", action="store_true", help="no progress lines")
    report = commands.add_parser("report", help="rebuild a folder's report from its result.json or sweep.json")
    report.add_argument("folder", help="a run or report folder holding result.json, or a sweep folder")
    report.add_argument("--quiet", action="store_true", help="no progress bars")
    summary = commands.add_parser("summary", help="the summary of a result file")
    summary.add_argument("result", help="a result.json")
    summary.add_argument("--markdown", action="store_true", help="summary.md instead of the console table")
    compare = commands.add_parser("compare", help="two results: same workload? same tokens call by call? "
                                                  "Or two sweep folders: wall times and their ratio")
    compare.add_argument("a", help="a result.json, or a sweep folder (holding sweep.json)")
    compare.add_argument("b", help="another result.json, or another sweep folder")
    publish = commands.add_parser("publish", help="copy a finished run folder into reports/")
    publish.add_argument("run_folder", help="a folder under runs/ holding a valid result.json")
    publish.add_argument("--name", default=None, help="report folder name (default: the run's name)")
    publish.add_argument("--reports-root", default=str(PARAMS_DIR.parent / "reports"), help="default: reports/")
    return top


def stop_on_sigterm() -> None:
    """SIGTERM ends a command the way Ctrl-C does, so every cleanup (partial folders, kernels,
    temporary kernel specs, child processes) runs on both."""
    import signal
    import threading

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


COMMANDS = {"run": cmd_run, "bench": cmd_bench, "sweep": cmd_sweep, "report": cmd_report, "summary": cmd_summary,
            "publish": cmd_publish, "compare": cmd_compare}


def main(argv: list[str] | None = None) -> int:
    from .publish import PublishError
    from .record import ResultError

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    stop_on_sigterm()
    if args.command == "run" and not (args.params_option or args.params_file):
        args.params_file = str(default_params_file())
        say(f"no parameter file given: using {args.params_file}")
    try:
        return COMMANDS[args.command](args, argv)
    except (ParameterError, PublishError, ResultError, OSError) as err:
        say(f"error: {err}")
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
